"""Path safety: every path a caller or a stream names stays inside its checkpoint.

Relative paths in a checkpoint are "/"-separated, without "." or ".." parts. Symlinks inside a
checkpoint may point elsewhere inside it; one that leads out is refused, so a checkpoint can never
be used to read or overwrite files beyond it.
"""

from __future__ import annotations

import os
from pathlib import Path

from cairn.storage.errors import UnsafePathError

# Marks files that are being written: a reader skips them, a crash leaves nothing that looks whole.
PARTIAL_MARKER = ".cairn-partial-"


def check_checkpoint_uuid(checkpoint_uuid: str) -> str:
    """A checkpoint id names one directory (or key prefix): a single plain path segment.

    A leading "." is refused too, so ids never collide with Cairn's own hidden staging folders.
    """
    if not checkpoint_uuid:
        raise UnsafePathError("checkpoint_uuid: required")
    if (
        "/" in checkpoint_uuid
        or "\\" in checkpoint_uuid
        or "\x00" in checkpoint_uuid
        or checkpoint_uuid.startswith(".")
    ):
        raise UnsafePathError(
            f"checkpoint_uuid: {checkpoint_uuid!r} must be a single path segment "
            "(no '/', '\\' or NUL, not starting with '.')"
        )
    return checkpoint_uuid


def normalize_relative_path(path: str) -> str:
    """The canonical form of a file's path in a checkpoint; raises UnsafePathError when it could
    leave the checkpoint or names no file."""
    if not path:
        raise UnsafePathError("path: must not be empty")
    if "\x00" in path:
        raise UnsafePathError(f"path {path!r}: must not contain NUL")
    if path.startswith("/"):
        raise UnsafePathError(f"path {path!r}: must be relative to the checkpoint directory, not absolute")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafePathError(f"path {path!r}: must not contain '..'")
    if not parts or path.endswith("/"):
        raise UnsafePathError(f"path {path!r}: must name a file, not a directory")
    return "/".join(parts)


def is_within(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether `path` is `root` or below it, both taken literally (resolve them first)."""
    path_s, root_s = os.fspath(path), os.fspath(root)
    return os.path.commonpath([path_s, root_s]) == root_s


def target_for_write(root: Path, relative_path: str) -> Path:
    """Where to write `relative_path` under `root`, with its parent directories created.

    The parent is resolved before anything is created, so a symlinked directory that leads out of
    `root` is refused before a single directory appears outside it.
    """
    relative_path = normalize_relative_path(relative_path)
    target = root / relative_path
    real_root = os.path.realpath(root)
    real_parent = os.path.realpath(target.parent)
    if not is_within(real_parent, real_root):
        raise UnsafePathError(
            f"path {relative_path!r}: its directory leads outside the checkpoint (through a symlink)"
        )
    if target.is_dir() and not target.is_symlink():
        raise UnsafePathError(f"path {relative_path!r}: a directory is already there")
    target.parent.mkdir(parents=True, exist_ok=True)
    return target
