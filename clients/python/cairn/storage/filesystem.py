"""Storage on a filesystem every process sees at the same path: shared_fs and directory.

Checkpoints are directories `<base_dir>/<uuid>/`; trial code writes into them directly. Cairn runs
trials as local processes, so shared_fs's host_path is also the path trial code uses.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from cairn.storage.atomic import copy_file_atomically, move_file, remove_tree
from cairn.storage.base import Resources, StorageManager, files_to_upload
from cairn.storage.chunks import DEFAULT_CHUNK_BYTES, FileChunk, chunks_of
from cairn.storage.config import SECTION, FilesystemStorageConfig
from cairn.storage.errors import CheckpointNotFound, StorageError
from cairn.storage.globs import Selector, glob_selector
from cairn.storage.local_tree import (
    LocalFile,
    entries_in_place,
    prune_empty_directories,
    read_tree,
    sizes_in_place,
)
from cairn.storage.paths import check_checkpoint_uuid, target_for_write

# Uploads that arrive as streams are assembled here, on the same filesystem as the checkpoints, so
# that moving them into place is a rename. The leading "." keeps it apart from checkpoint ids.
STAGING_DIR_NAME = ".cairn-staging"
_ROOT_FIELD = {"shared_fs": "host_path", "directory": "container_path"}


class FilesystemStorageManager(StorageManager):
    def __init__(self, config: FilesystemStorageConfig) -> None:
        self._type = config.type
        self._root = Path(config.root)
        self._base = Path(config.base_dir)
        self.description = f"{config.type} storage at {config.base_dir}"

    def checkpoint_dir(self, checkpoint_uuid: str) -> Path:
        return self._base / check_checkpoint_uuid(checkpoint_uuid)

    @contextlib.contextmanager
    def store_path(self, checkpoint_uuid: str) -> Iterator[Path]:
        directory = self.checkpoint_dir(checkpoint_uuid)
        directory.mkdir(parents=True, exist_ok=True)
        yield directory

    @contextlib.contextmanager
    def restore_path(self, checkpoint_uuid: str, selector: Selector | None = None) -> Iterator[Path]:
        yield self._existing_checkpoint_dir(checkpoint_uuid)

    def upload(
        self,
        local_dir: Path,
        checkpoint_uuid: str,
        paths: Iterable[str] | None = None,
        *,
        move: bool = False,
    ) -> Resources:
        destination = self.checkpoint_dir(checkpoint_uuid)
        files = files_to_upload(local_dir, paths)
        if destination.is_dir() and os.path.samefile(local_dir, destination):
            # Written in place through store_path: already stored.
            return {file.relative_path: file.size for file in files}
        destination.mkdir(parents=True, exist_ok=True)
        stored: Resources = {}
        for file in files:
            target = target_for_write(destination, file.relative_path)
            # A symlink's target may be shared with other links: only plain files are taken.
            if move and file.source == local_dir / file.relative_path:
                move_file(file.source, target)
            else:
                copy_file_atomically(file.source, target)
            stored[file.relative_path] = file.size
        return stored

    def download(self, checkpoint_uuid: str, local_dir: Path, selector: Selector | None = None) -> Resources:
        source = self._existing_checkpoint_dir(checkpoint_uuid)
        copied: Resources = {}
        for file in read_tree(source):
            if selector is None or selector(file.relative_path):
                copied[file.relative_path] = copy_file_atomically(
                    file.source, target_for_write(local_dir, file.relative_path)
                )
        return copied

    def exists(self, checkpoint_uuid: str) -> bool:
        return self.checkpoint_dir(checkpoint_uuid).is_dir()

    def list_files(self, checkpoint_uuid: str) -> Resources:
        directory = self.checkpoint_dir(checkpoint_uuid)
        if not directory.is_dir():
            return {}
        return {file.relative_path: file.size for file in read_tree(directory)}

    def delete(self, checkpoint_uuid: str, globs: Iterable[str] = ()) -> Resources:
        directory = self.checkpoint_dir(checkpoint_uuid)
        selector = glob_selector(globs)
        if not self._root.is_dir():
            # An unmounted share looks exactly like this; reporting "deleted" would leak its files.
            raise StorageError(
                f"{SECTION}.{_ROOT_FIELD[self._type]}: {self._root} does not exist (not mounted?); "
                f"checkpoint {checkpoint_uuid} was not deleted"
            )
        if directory.is_symlink() or not directory.is_dir():
            remove_tree(directory)
            return {}
        if selector is None:
            remove_tree(directory)
        else:
            for relative_path, path in entries_in_place(directory).items():
                if selector(relative_path):
                    path.unlink(missing_ok=True)
            prune_empty_directories(directory)
        return sizes_in_place(directory) if directory.is_dir() else {}

    def iter_file_chunks(
        self,
        checkpoint_uuid: str,
        selector: Selector | None = None,
        chunk_size: int = DEFAULT_CHUNK_BYTES,
    ) -> Iterator[FileChunk]:
        # Resolved before the generator starts, so a missing checkpoint fails the call itself.
        directory = self._existing_checkpoint_dir(checkpoint_uuid)
        files = [f for f in read_tree(directory) if selector is None or selector(f.relative_path)]
        return self._chunks_of_files(files, chunk_size)

    @staticmethod
    def _chunks_of_files(files: list[LocalFile], chunk_size: int) -> Iterator[FileChunk]:
        for file in files:
            with open(file.source, "rb") as reader:
                yield from chunks_of(file.relative_path, reader.read, file.mode, chunk_size)

    @contextlib.contextmanager
    def staging_dir(self, checkpoint_uuid: str) -> Iterator[Path]:
        check_checkpoint_uuid(checkpoint_uuid)
        staging_root = self._base / STAGING_DIR_NAME
        staging_root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{checkpoint_uuid}-", dir=staging_root))
        try:
            yield staging
        finally:
            remove_tree(staging)

    def check_writable(self) -> None:
        probe = self._base / f".cairn-probe-{secrets.token_hex(6)}"
        try:
            self._base.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"cairn storage probe\n")
            probe.unlink()
        except OSError as exc:
            with contextlib.suppress(OSError):
                probe.unlink(missing_ok=True)
            raise StorageError(f"{self.description}: not writable: {exc}") from exc

    def _existing_checkpoint_dir(self, checkpoint_uuid: str) -> Path:
        directory = self.checkpoint_dir(checkpoint_uuid)
        if not directory.is_dir():
            raise CheckpointNotFound(checkpoint_uuid, self.description)
        return directory
