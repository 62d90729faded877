"""Path safety: nothing a caller names or a checkpoint holds reaches outside the checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cairn.storage import (
    FileChunk,
    StorageManager,
    UnsafePathError,
    glob_selector,
    storage_manager_from_config,
)
from cairn.storage.paths import check_checkpoint_uuid, normalize_relative_path, target_for_write


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/etc/passwd", "must be relative to the checkpoint directory, not absolute"),
        ("../escape", "must not contain '..'"),
        ("a/../../escape", "must not contain '..'"),
        ("", "must not be empty"),
        ("dir/", "must name a file, not a directory"),
        ("./.", "must name a file, not a directory"),
        ("a\x00b", "must not contain NUL"),
    ],
)
def test_unsafe_relative_paths_are_refused(path: str, message: str) -> None:
    with pytest.raises(UnsafePathError, match=message):
        normalize_relative_path(path)


def test_relative_paths_are_normalized() -> None:
    assert normalize_relative_path("./a//b/./c.txt") == "a/b/c.txt"


@pytest.mark.parametrize("bad", ["", "a/b", "..", ".hidden", "a\\b"])
def test_checkpoint_uuid_is_one_plain_segment(bad: str) -> None:
    with pytest.raises(UnsafePathError, match="checkpoint_uuid"):
        check_checkpoint_uuid(bad)


@pytest.mark.parametrize("uuid", ["../outside", "/abs", ".cairn-staging"])
def test_every_backend_refuses_unsafe_checkpoint_ids(storage_section: dict[str, Any], uuid: str) -> None:
    manager = storage_manager_from_config(storage_section)
    with pytest.raises(UnsafePathError, match="checkpoint_uuid"):
        manager.delete(uuid)
    with pytest.raises(UnsafePathError, match="checkpoint_uuid"):
        manager.write_chunks(uuid, [FileChunk("a", 0, b"", eof=True)])


@pytest.mark.parametrize("path", ["../evil.txt", "/tmp/evil.txt", "a/../../evil.txt"])
def test_chunk_paths_that_escape_are_refused(storage_section: dict[str, Any], path: str) -> None:
    manager = storage_manager_from_config(storage_section)
    with pytest.raises(UnsafePathError, match="path"):
        manager.write_chunks("ckpt", [FileChunk(path, 0, b"evil", eof=True)])
    assert not manager.exists("ckpt")


def shared_fs(tmp_path: Path) -> tuple[StorageManager, Path]:
    root = tmp_path / "storage"
    root.mkdir()
    return storage_manager_from_config({"type": "shared_fs", "host_path": str(root)}), root


def test_symlink_leading_out_is_refused_on_every_read(tmp_path: Path) -> None:
    manager, root = shared_fs(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not leak")
    checkpoint = root / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "ok.txt").write_text("fine")
    (checkpoint / "leak.txt").symlink_to(secret)
    expected = r"leak\.txt: symlink leads outside the checkpoint directory"
    with pytest.raises(UnsafePathError, match=expected):
        manager.list_files("ckpt")
    with pytest.raises(UnsafePathError, match=expected):
        manager.download("ckpt", tmp_path / "out")
    with pytest.raises(UnsafePathError, match=expected):
        manager.iter_file_chunks("ckpt")
    # Deleting it removes the link, never what it points to.
    assert manager.delete("ckpt") == {}
    assert secret.read_text() == "do not leak"


def test_symlinks_inside_the_checkpoint_are_followed_once(tmp_path: Path) -> None:
    manager, root = shared_fs(tmp_path)
    checkpoint = root / "ckpt"
    (checkpoint / "real").mkdir(parents=True)
    (checkpoint / "real" / "w.bin").write_bytes(b"12345")
    (checkpoint / "alias.bin").symlink_to(checkpoint / "real" / "w.bin")
    (checkpoint / "real" / "loop").symlink_to(checkpoint)  # a cycle must not hang the walk
    assert manager.list_files("ckpt") == {"alias.bin": 5, "real/w.bin": 5}


def test_upload_refuses_a_local_symlink_leading_out(tmp_path: Path) -> None:
    manager, _root = shared_fs(tmp_path)
    local = tmp_path / "local"
    local.mkdir()
    (local / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(UnsafePathError, match="passwd: symlink leads outside"):
        manager.upload(local, "ckpt")


def test_writes_through_a_symlinked_directory_leading_out_are_refused(tmp_path: Path) -> None:
    manager, root = shared_fs(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    checkpoint = root / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "sub").symlink_to(outside)
    with pytest.raises(UnsafePathError, match="its directory leads outside the checkpoint"):
        target_for_write(checkpoint, "sub/deeper/evil.txt")
    assert list(outside.iterdir()) == []
    # Downloads write through the same check.
    manager.write_chunks("other", [FileChunk("sub/evil.txt", 0, b"x", eof=True)])
    with pytest.raises(UnsafePathError, match="its directory leads outside"):
        manager.download("other", checkpoint)
    assert list(outside.iterdir()) == []


def test_glob_semantics() -> None:
    paths = ["a.pt", "model/w.pt", "model/deep/x.pt", "logs/run.log", "notes.txt"]

    def chosen(*globs: str) -> list[str]:
        selector = glob_selector(globs)
        assert selector is not None
        return [path for path in paths if selector(path)]

    assert chosen("*.pt") == ["a.pt"]
    assert chosen("**/*.pt") == ["a.pt", "model/w.pt", "model/deep/x.pt"]
    assert chosen("**/*") == paths
    assert chosen("*") == paths  # a matched directory brings everything under it
    assert chosen("model") == ["model/w.pt", "model/deep/x.pt"]
    assert chosen("model/**") == ["model/w.pt", "model/deep/x.pt"]
    assert chosen("[ln]o*") == ["logs/run.log", "notes.txt"]
    assert chosen("[!m]*.pt") == ["a.pt"]
    assert chosen("?.pt", "logs/*.log") == ["a.pt", "logs/run.log"]
    assert glob_selector([]) is None


@pytest.mark.parametrize("glob", ["/abs/*", "../*", "a/../../b", ""])
def test_unsafe_globs_are_refused(glob: str) -> None:
    with pytest.raises(UnsafePathError, match="glob"):
        glob_selector([glob])


def test_no_directory_appears_outside_when_refused(tmp_path: Path) -> None:
    manager, _root = shared_fs(tmp_path)
    with pytest.raises(UnsafePathError):
        manager.write_chunks("ckpt", [FileChunk("../../x/y.txt", 0, b"", eof=True)])
    assert sorted(os.listdir(tmp_path)) == ["storage"]
