"""Atomic file writes: data goes to a hidden partial file beside the target and is renamed over
it once complete and flushed, so a reader sees the old file or the whole new one, never half."""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from cairn.storage.paths import PARTIAL_MARKER

DEFAULT_FILE_MODE = 0o644
# Only permission bits travel: setuid, setgid and sticky bits from a stream are dropped.
PERMISSION_BITS = 0o777
_COPY_BUFFER_BYTES = 1024 * 1024


def effective_mode(mode: int | None) -> int:
    """The permission bits a written file gets; 0 or None means "not given"."""
    bits = (mode or 0) & PERMISSION_BITS
    return bits or DEFAULT_FILE_MODE


class PartialFile:
    """A file being written to `target`; it appears there only on `commit()`."""

    def __init__(self, target: Path, mode: int | None = None) -> None:
        self.target = target
        self.mode = effective_mode(mode)
        self.size = 0
        self._tmp = target.parent / f".{target.name}{PARTIAL_MARKER}{secrets.token_hex(4)}"
        self._file: BinaryIO | None = open(self._tmp, "xb")  # noqa: SIM115 - closed in commit/abort

    def write(self, data: bytes) -> None:
        if self._file is None:
            raise ValueError(f"{self.target}: already committed or aborted")
        self._file.write(data)
        self.size += len(data)

    def commit(self) -> None:
        if self._file is None:
            raise ValueError(f"{self.target}: already committed or aborted")
        file, self._file = self._file, None
        try:
            file.flush()
            os.fsync(file.fileno())
            file.close()
            os.chmod(self._tmp, self.mode)
            os.replace(self._tmp, self.target)
        except BaseException:
            file.close()
            self._tmp.unlink(missing_ok=True)
            raise

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._tmp.unlink(missing_ok=True)


def copy_file_atomically(source: Path, target: Path) -> int:
    """Copy `source` (content and permission bits) to `target`; returns the bytes copied."""
    partial = PartialFile(target, os.stat(source).st_mode)
    try:
        with open(source, "rb") as reader:
            while data := reader.read(_COPY_BUFFER_BYTES):
                partial.write(data)
        partial.commit()
    except BaseException:
        partial.abort()
        raise
    return partial.size


def move_file(source: Path, target: Path) -> None:
    """Rename `source` over `target` (atomic); across filesystems, copy then remove."""
    try:
        os.replace(source, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:  # not on the same filesystem
            raise
        copy_file_atomically(source, target)
        source.unlink()


def remove_tree(path: Path) -> None:
    """Remove a file, link or directory tree; a missing path is fine. Links are never followed."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, onerror=_ignore_missing)


def _ignore_missing(
    function: Any, path: str, exc_info: tuple[type[BaseException], BaseException, TracebackType]
) -> None:
    # Something else removed part of the tree meanwhile: that is the goal anyway.
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]
