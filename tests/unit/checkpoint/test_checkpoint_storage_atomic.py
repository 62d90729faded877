"""Atomic writes: a reader sees a whole file or none; a broken stream leaves no partial file."""

from __future__ import annotations

from pathlib import Path

import pytest

from cairn.storage import ChunkStreamError, ChunkWriter, FileChunk, chunks_of, storage_manager_from_config
from cairn.storage.atomic import PartialFile, copy_file_atomically


def test_partial_file_appears_only_on_commit(tmp_path: Path) -> None:
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    partial = PartialFile(target, 0o600)
    partial.write(b"new ")
    partial.write(b"content")
    assert target.read_bytes() == b"old"
    manager = storage_manager_from_config({"type": "directory", "container_path": str(tmp_path.parent)})
    # The half-written file is not part of the checkpoint while it is written.
    assert manager.list_files(tmp_path.name) == {"model.bin": 3}
    partial.commit()
    assert target.read_bytes() == b"new content"
    assert target.stat().st_mode & 0o777 == 0o600
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.bin"]


def test_partial_file_abort_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    partial = PartialFile(target)
    partial.write(b"half")
    partial.abort()
    assert target.read_bytes() == b"old"
    assert [path.name for path in tmp_path.iterdir()] == ["model.bin"]


def test_copy_keeps_content_and_mode(tmp_path: Path) -> None:
    source = tmp_path / "run.sh"
    source.write_bytes(b"#!/bin/sh\n")
    source.chmod(0o751)
    assert copy_file_atomically(source, tmp_path / "copy.sh") == 10
    assert (tmp_path / "copy.sh").read_bytes() == b"#!/bin/sh\n"
    assert (tmp_path / "copy.sh").stat().st_mode & 0o777 == 0o751


def test_chunk_writer_interleaved_files(tmp_path: Path) -> None:
    with ChunkWriter(tmp_path) as writer:
        writer.write(FileChunk("a.bin", 0, b"aa", mode=0o640))
        writer.write(FileChunk("b/b.bin", 0, b"b", eof=True))
        writer.write(FileChunk("a.bin", 2, b"a", eof=True))
        assert writer.finish() == {"b/b.bin": 1, "a.bin": 3}
    assert (tmp_path / "a.bin").read_bytes() == b"aaa"
    assert (tmp_path / "a.bin").stat().st_mode & 0o777 == 0o640
    # Setuid and other special bits never come through a stream.
    with ChunkWriter(tmp_path) as writer:
        writer.write(FileChunk("c.bin", 0, b"", mode=0o4755, eof=True))
    assert (tmp_path / "c.bin").stat().st_mode & 0o7777 == 0o755


@pytest.mark.parametrize(
    ("chunks", "message"),
    [
        ([FileChunk("a", 3, b"x")], r"file\.offset: 3 for a, expected 0 \(its first chunk\)"),
        ([FileChunk("a", 0, b"xy"), FileChunk("a", 1, b"z")], r"file\.offset: 1 for a, expected 2"),
        (
            [FileChunk("a", 0, b"x", eof=True), FileChunk("a", 1, b"y")],
            r"file\.path: a was already completed",
        ),
        (
            [FileChunk("./a", 0, b"x", eof=True), FileChunk("a", 0, b"y")],
            r"file\.path: a was already completed",
        ),
        ([FileChunk("a", -1, b"x")], r"file\.offset: -1 for a must be >= 0"),
    ],
)
def test_chunk_writer_refuses_out_of_order_chunks(
    tmp_path: Path, chunks: list[FileChunk], message: str
) -> None:
    with pytest.raises(ChunkStreamError, match=message), ChunkWriter(tmp_path) as writer:
        for chunk in chunks:
            writer.write(chunk)
    # Whatever was open is gone; completed files may stay (the caller stages them).
    assert not [path for path in tmp_path.rglob("*") if ".cairn-partial-" in path.name]


def test_chunks_of_reads_one_ahead() -> None:
    data = b"0123456789"
    position = 0

    def read(size: int) -> bytes:
        nonlocal position
        piece = data[position : position + size]
        position += len(piece)
        return piece

    chunks = list(chunks_of("f", read, 0o600, chunk_size=5))
    assert [(c.offset, c.data, c.mode, c.eof) for c in chunks] == [
        (0, b"01234", 0o600, False),
        (5, b"56789", 0, True),
    ]
    assert list(chunks_of("e", lambda size: b"", 0o644)) == [FileChunk("e", 0, b"", 0o644, True)]
