"""What every checkpoint storage backend offers.

A checkpoint is a set of files under one id (its uuid). Trial code writes through `store_path` or
`upload` and reads through `restore_path` or `download`; services without a shared view of the
storage stream files with `iter_file_chunks` and `write_chunks`; garbage collection uses `delete`,
which is idempotent: deleting what is already gone succeeds and reports nothing left.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from cairn.storage.chunks import DEFAULT_CHUNK_BYTES, ChunkWriter, FileChunk
from cairn.storage.errors import StorageError
from cairn.storage.globs import Selector
from cairn.storage.local_tree import LocalFile, read_tree
from cairn.storage.paths import normalize_relative_path

# Path → size in bytes, relative to the checkpoint directory ("/"-separated).
Resources = dict[str, int]


class StorageManager(abc.ABC):
    """One configured storage (a `checkpoint_storage` section); safe to share between threads."""

    # Where the checkpoints are, for messages ("shared_fs storage at /mnt/ckpts").
    description: str

    @abc.abstractmethod
    def store_path(self, checkpoint_uuid: str) -> contextlib.AbstractContextManager[Path]:
        """A local directory to write a new checkpoint into; its files are in storage once the
        block exits without an exception. Direct-access backends yield the real directory."""

    @abc.abstractmethod
    def restore_path(
        self, checkpoint_uuid: str, selector: Selector | None = None
    ) -> contextlib.AbstractContextManager[Path]:
        """A local directory holding the checkpoint's files (the real one on direct-access
        backends, where `selector` is ignored). Raises CheckpointNotFound."""

    @abc.abstractmethod
    def upload(
        self,
        local_dir: Path,
        checkpoint_uuid: str,
        paths: Iterable[str] | None = None,
        *,
        move: bool = False,
    ) -> Resources:
        """Store the files of `local_dir` (only `paths`, relative to it, when given; entries that
        end in "/" name directories and are skipped). `move` lets the backend take the files
        instead of copying them. Returns what was stored."""

    @abc.abstractmethod
    def download(self, checkpoint_uuid: str, local_dir: Path, selector: Selector | None = None) -> Resources:
        """Copy the checkpoint's (selected) files into `local_dir`, each file atomically.
        Raises CheckpointNotFound."""

    @abc.abstractmethod
    def exists(self, checkpoint_uuid: str) -> bool: ...

    @abc.abstractmethod
    def list_files(self, checkpoint_uuid: str) -> Resources:
        """The checkpoint's files; empty when it does not exist."""

    @abc.abstractmethod
    def delete(self, checkpoint_uuid: str, globs: Iterable[str] = ()) -> Resources:
        """Delete the checkpoint (only the files matching `globs` when given) and return what is
        left. A missing checkpoint or file is not an error. Raises StorageError when the storage
        itself cannot be reached, so that nothing is reported deleted that may still be there."""

    @abc.abstractmethod
    def iter_file_chunks(
        self,
        checkpoint_uuid: str,
        selector: Selector | None = None,
        chunk_size: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[FileChunk]:
        """The checkpoint's (selected) files as chunks (see `cairn.storage.chunks`).
        Raises CheckpointNotFound before yielding anything."""

    @abc.abstractmethod
    def staging_dir(self, checkpoint_uuid: str) -> contextlib.AbstractContextManager[Path]:
        """A scratch directory, removed on exit, from which `upload(..., move=True)` is cheapest."""

    @abc.abstractmethod
    def check_writable(self) -> None:
        """Raise StorageError unless the storage exists (or can be created) and takes writes."""

    def write_chunks(self, checkpoint_uuid: str, chunks: Iterable[FileChunk]) -> Resources:
        """Store a stream of chunks. Files appear in storage only once the whole stream was read
        and was in order; otherwise nothing changes. Returns the files written."""
        with self.staging_dir(checkpoint_uuid) as staging:
            with ChunkWriter(staging) as writer:
                for chunk in chunks:
                    writer.write(chunk)
                written = writer.finish()
            self.upload(staging, checkpoint_uuid, move=True)
        return written


def files_to_upload(local_dir: Path, paths: Iterable[str] | None) -> list[LocalFile]:
    """The files of `local_dir` an upload takes: all of them, or those named in `paths`."""
    if not local_dir.is_dir():
        raise StorageError(f"local_dir: {local_dir} is not a directory")
    files = read_tree(local_dir)
    if paths is None:
        return files
    wanted = {normalize_relative_path(path) for path in paths if not path.endswith("/")}
    by_path = {file.relative_path: file for file in files}
    missing = sorted(wanted - by_path.keys())
    if missing:
        raise StorageError(f"paths: not found in {local_dir}: {', '.join(missing[:10])}")
    return [by_path[path] for path in sorted(wanted)]
