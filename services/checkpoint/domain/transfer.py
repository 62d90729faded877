"""Streaming a checkpoint's files into and out of storage for callers that cannot reach it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from cairn.storage import FileChunk, Resources, StorageManager, glob_selector
from cairn.storage.paths import check_checkpoint_uuid
from services.common.logging import get_logger

log = get_logger(__name__)

# Download chunk size: large enough to keep per-message overhead small, far below message limits.
DOWNLOAD_CHUNK_BYTES = 1024 * 1024


def receive_checkpoint(
    manager: StorageManager, checkpoint_uuid: str, chunks: Iterable[FileChunk]
) -> Resources:
    """Store the files of a chunk stream; they appear only if the whole stream is in order.
    Returns everything the checkpoint holds afterwards (earlier uploads to the same uuid included,
    as sharded uploads from several ranks add up)."""
    check_checkpoint_uuid(checkpoint_uuid)
    written = manager.write_chunks(checkpoint_uuid, chunks)
    log.info(
        "checkpoint files received",
        checkpoint_uuid=checkpoint_uuid,
        storage=manager.description,
        files=len(written),
        bytes=sum(written.values()),
    )
    return manager.list_files(checkpoint_uuid)


def send_checkpoint(
    manager: StorageManager,
    checkpoint_uuid: str,
    globs: Sequence[str] = (),
    chunk_size: int = DOWNLOAD_CHUNK_BYTES,
) -> Iterator[FileChunk]:
    """The checkpoint's files (those matching `globs`, when given) as chunks. Bad globs, a bad uuid
    and a missing checkpoint raise here, before the first chunk."""
    selector = glob_selector(globs)
    return manager.iter_file_chunks(checkpoint_uuid, selector, chunk_size)
