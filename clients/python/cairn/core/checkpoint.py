"""`core.checkpoint`: store and restore checkpoints (Determined's CheckpointContext).

Files go to checkpoint storage through `cairn.storage`; a checkpoint is recorded (reported to the
master) only once all of its files, metadata.json included, are there. A checkpoint whose writing
failed is removed from storage and never recorded.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cairn.core.checkpoint_records import METADATA_FILE, CheckpointRecords
from cairn.core.distributed import DistributedContext
from cairn.core.json_values import JsonValue, plain_count, plain_mapping
from cairn.storage import Selector, StorageManager
from cairn.storage.local_tree import read_tree

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]


class DownloadMode(enum.Enum):
    """Who downloads in a multi-process trial; with one process, it does."""

    LocalWorkersShareDownload = "LOCAL_WORKERS_SHARE_DOWNLOAD"
    NoSharedDownload = "NO_SHARED_DOWNLOAD"


def checked_metadata(metadata: Any) -> dict[str, JsonValue]:
    """The metadata as plain JSON; like Determined, it must say how far training got."""
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata: must be a dict, not {type(metadata).__name__}")
    if "steps_completed" not in metadata:
        raise ValueError(
            "metadata: must contain 'steps_completed' (the batches trained so far), "
            "e.g. store_path({'steps_completed': 100})"
        )
    plain = plain_mapping(metadata, "metadata")
    plain["steps_completed"] = plain_count(metadata["steps_completed"], "metadata['steps_completed']")
    return plain


def write_metadata_file(directory: Path, metadata: dict[str, JsonValue]) -> None:
    (directory / METADATA_FILE).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")


class CheckpointContext:
    def __init__(
        self, distributed: DistributedContext, storage: StorageManager, records: CheckpointRecords
    ) -> None:
        self._distributed = distributed
        self._storage = storage
        self._records = records

    @property
    def storage(self) -> StorageManager:
        return self._storage

    def _check_writer(self, shard: bool) -> None:
        if not shard and not self._distributed.is_chief:
            raise RuntimeError("only the chief (rank 0) may store a checkpoint unless shard=True")

    @contextlib.contextmanager
    def store_path(self, metadata: Mapping[str, Any], *, shard: bool = False) -> Iterator[tuple[Path, str]]:
        """A directory to write a new checkpoint into, and its storage id.

        When the block ends without an exception, the files (with a metadata.json) are in storage
        and the checkpoint is reported; when it raises, the partial checkpoint is removed and
        nothing is reported.
        """
        self._check_writer(shard)
        plain = checked_metadata(metadata)
        storage_id = str(uuid.uuid4())
        try:
            with self._storage.store_path(storage_id) as path:
                yield path, storage_id
                write_metadata_file(path, plain)
        except BaseException:
            self._discard(storage_id)
            raise
        self._record(storage_id, plain)

    def upload(
        self,
        ckpt_dir: PathLike,
        metadata: Mapping[str, Any],
        *,
        shard: bool = False,
        selector: Selector | None = None,
    ) -> str:
        """Store the files of `ckpt_dir` (those `selector` accepts, when given) as a new checkpoint
        and report it; returns its storage id. `ckpt_dir` itself is left as it was."""
        self._check_writer(shard)
        plain = checked_metadata(metadata)
        source = Path(ckpt_dir)
        paths = None
        if selector is not None:
            paths = [file.relative_path for file in read_tree(source) if selector(file.relative_path)]
        storage_id = str(uuid.uuid4())
        try:
            self._storage.upload(source, storage_id, paths)
            with self._storage.staging_dir(storage_id) as staging:
                write_metadata_file(staging, plain)
                self._storage.upload(staging, storage_id, [METADATA_FILE], move=True)
        except BaseException:
            self._discard(storage_id)
            raise
        self._record(storage_id, plain)
        return storage_id

    @contextlib.contextmanager
    def restore_path(
        self,
        storage_id: str,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> Iterator[Path]:
        """A local directory with the checkpoint's files (read-only use: on shared storage it is
        the checkpoint itself)."""
        DownloadMode(download_mode)
        with self._storage.restore_path(storage_id, selector) as path:
            yield path

    def download(
        self,
        storage_id: str,
        ckpt_dir: PathLike,
        download_mode: DownloadMode = DownloadMode.LocalWorkersShareDownload,
        *,
        selector: Selector | None = None,
    ) -> None:
        """Copy the checkpoint's files into `ckpt_dir`."""
        DownloadMode(download_mode)
        target = Path(ckpt_dir)
        target.mkdir(parents=True, exist_ok=True)
        self._storage.download(storage_id, target, selector)

    def get_metadata(self, storage_id: str) -> dict[str, Any]:
        return self._records.metadata_of(storage_id)

    def delete(self, storage_id: str, globs: list[str] | None = None) -> None:
        """Delete the checkpoint's files (only those matching `globs`, when given), then tell the
        master what is left."""
        remaining = self._storage.delete(storage_id, globs or ())
        self._records.files_changed(storage_id, remaining)

    def _record(self, storage_id: str, metadata: dict[str, JsonValue]) -> None:
        resources = self._storage.list_files(storage_id)
        self._records.report(storage_id, resources, metadata)

    def _discard(self, storage_id: str) -> None:
        try:
            self._storage.delete(storage_id)
        except Exception as exc:
            log.error("could not remove the partial checkpoint %s: %s", storage_id, exc)
