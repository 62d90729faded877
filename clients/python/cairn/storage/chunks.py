"""Checkpoint files as streams of chunks, for callers that cannot reach the storage themselves.

A file travels as chunks in order: offsets start at 0 and follow on without gaps or overlaps, the
first chunk carries the permission bits, the last one has `eof` set. An empty file is one empty
chunk with `eof`. Several files may be interleaved; each one's chunks stay in order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from cairn.storage.atomic import PartialFile
from cairn.storage.errors import ChunkStreamError
from cairn.storage.paths import normalize_relative_path, target_for_write

DEFAULT_CHUNK_BYTES = 1024 * 1024
# Files written at once by one stream; a stream that opens more is refused, not trusted.
MAX_OPEN_FILES = 256


@dataclass(frozen=True)
class FileChunk:
    path: str
    offset: int
    data: bytes
    # Permission bits; meaningful on a file's first chunk, 0 elsewhere.
    mode: int = 0
    eof: bool = False


def chunks_of(
    relative_path: str, read: Callable[[int], bytes], mode: int, chunk_size: int = DEFAULT_CHUNK_BYTES
) -> Iterator[FileChunk]:
    """The chunks of one file whose content `read(n)` returns piece by piece (b"" at the end).

    Reads one chunk ahead, so the last chunk is known to be last without trusting a size taken
    before the read.
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size: must be > 0, not {chunk_size}")
    offset = 0
    current = read(chunk_size)
    first = True
    while True:
        following = read(chunk_size) if current else b""
        eof = not following
        yield FileChunk(relative_path, offset, current, mode if first else 0, eof)
        if eof:
            return
        offset += len(current)
        current = following
        first = False


class ChunkWriter:
    """Writes a stream of chunks into files under `root`, each file atomically at its `eof`.

    Use as a context manager: leaving it with an exception (or without `finish()`) removes the
    partial files it had open; files already completed stay.
    """

    def __init__(self, root: Path) -> None:
        self._root = root
        self._open: dict[str, PartialFile] = {}
        self._done: dict[str, int] = {}

    def write(self, chunk: FileChunk) -> None:
        path = normalize_relative_path(chunk.path)
        if chunk.offset < 0:
            raise ChunkStreamError(f"file.offset: {chunk.offset} for {path} must be >= 0")
        if path in self._done:
            raise ChunkStreamError(f"file.path: {path} was already completed (a chunk with eof came before)")
        partial = self._open.get(path)
        if partial is None:
            if chunk.offset != 0:
                raise ChunkStreamError(
                    f"file.offset: {chunk.offset} for {path}, expected 0 (its first chunk)"
                )
            if len(self._open) >= MAX_OPEN_FILES:
                raise ChunkStreamError(f"file.path: {path} would be open file number {MAX_OPEN_FILES + 1}")
            partial = PartialFile(target_for_write(self._root, path), chunk.mode)
            self._open[path] = partial
        elif chunk.offset != partial.size:
            raise ChunkStreamError(f"file.offset: {chunk.offset} for {path}, expected {partial.size}")
        partial.write(chunk.data)
        if chunk.eof:
            del self._open[path]
            partial.commit()
            self._done[path] = partial.size

    def finish(self) -> dict[str, int]:
        """Path → size of every file written; raises if a file never got its last chunk."""
        if self._open:
            unfinished = ", ".join(sorted(self._open))
            raise ChunkStreamError(f"file.eof: the stream ended before the last chunk of {unfinished}")
        return dict(self._done)

    def abort(self) -> None:
        for partial in self._open.values():
            partial.abort()
        self._open.clear()

    def __enter__(self) -> ChunkWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.abort()
