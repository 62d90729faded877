from __future__ import annotations

import os
from pathlib import Path

import pytest

from cairn.client.model_definition import (
    TAR_DIRECTORY,
    TAR_REGULAR,
    ModelDefinitionError,
    ModelDefinitionTooLarge,
    build_model_definition,
)


def make_tree(root: Path, files: dict[str, bytes]) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def test_packs_files_and_directories_with_relative_paths(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": b"print('hi')\n", "model/net.py": b"x = 1\n", "const.yaml": b"a: 1\n"})
    os.chmod(tmp_path / "train.py", 0o755)
    os.utime(tmp_path / "model" / "net.py", (1_700_000_000, 1_700_000_000))

    files = {f.path: f for f in build_model_definition(tmp_path)}

    assert set(files) == {"const.yaml", "model", "model/net.py", "train.py"}
    assert files["model"].type == TAR_DIRECTORY == 53
    assert files["model"].content == b""
    assert files["train.py"].type == TAR_REGULAR == 48
    assert files["train.py"].content == b"print('hi')\n"
    assert files["train.py"].mode == 0o755
    assert files["model/net.py"].mtime == 1_700_000_000


def test_order_is_stable_and_parents_come_first(tmp_path: Path) -> None:
    make_tree(tmp_path, {"b/z.py": b"", "a.py": b"", "b/a/y.py": b""})
    paths = [f.path for f in build_model_definition(tmp_path)]
    assert paths == ["a.py", "b", "b/a", "b/a/y.py", "b/z.py"]


def test_skips_pycache_and_git_and_honours_ignore_files(tmp_path: Path) -> None:
    make_tree(
        tmp_path,
        {
            "train.py": b"",
            "__pycache__/train.cpython-311.pyc": b"",
            "pkg/__pycache__/x.pyc": b"",
            ".git/HEAD": b"ref",
            "data/big.npy": b"0" * 100,
            "data/README.md": b"",
            "outputs/run1/log.txt": b"",
            "notes.log": b"",
            "keep.log": b"",
            ".detignore": b"/data/*.npy\noutputs/\n*.log\n",
            ".cairnignore": b"!keep.log\n",
        },
    )
    paths = {f.path for f in build_model_definition(tmp_path)}
    assert paths == {"train.py", "pkg", "data", "data/README.md", "keep.log", ".detignore", ".cairnignore"}


def test_size_limit_error_names_directory_size_limit_and_ignore_file(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": b"", "data/blob.bin": b"x" * 3 * 1024 * 1024})
    with pytest.raises(ModelDefinitionTooLarge) as caught:
        build_model_definition(tmp_path, limit_bytes=2 * 1024 * 1024)
    message = str(caught.value)
    assert str(tmp_path) in message
    assert "3.0 MiB" in message
    assert "2.0 MiB" in message
    assert ".detignore" in message
    assert "\n" not in message


def test_ignoring_the_large_files_brings_it_under_the_limit(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": b"", "data/blob.bin": b"x" * 3 * 1024 * 1024, ".detignore": b"data/\n"})
    paths = [f.path for f in build_model_definition(tmp_path, limit_bytes=2 * 1024 * 1024)]
    assert paths == [".detignore", "train.py"]


def test_file_symlinks_are_read_through_and_directory_symlinks_skipped(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    make_tree(outside, {"shared.py": b"shared\n", "big/x.bin": b"x"})
    context = tmp_path / "context"
    make_tree(context, {"train.py": b""})
    (context / "shared.py").symlink_to(outside / "shared.py")
    (context / "big").symlink_to(outside / "big", target_is_directory=True)
    files = {f.path: f for f in build_model_definition(context)}
    assert set(files) == {"train.py", "shared.py"}
    assert files["shared.py"].content == b"shared\n"


def test_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ModelDefinitionError, match="is not a directory"):
        build_model_definition(tmp_path / "file.txt")
