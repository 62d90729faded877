"""The files of a checkpoint directory on a local or shared filesystem.

A checkpoint's content is its regular files. Symlinks that stay inside the directory are followed
(their target's content counts, each directory is visited once); a symlink that leads outside makes
the read fail with UnsafePathError. Half-written files (see `atomic`) are not part of it.
"""

from __future__ import annotations

import logging
import os
import stat as stat_mode
from dataclasses import dataclass
from pathlib import Path

from cairn.storage.errors import UnsafePathError
from cairn.storage.paths import PARTIAL_MARKER, is_within

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalFile:
    # "/"-separated path relative to the checkpoint directory.
    relative_path: str
    # Where to read the content (a symlink's resolved target).
    source: Path
    size: int
    mode: int


def read_tree(root: Path) -> list[LocalFile]:
    """Every file of the checkpoint at `root`, sorted by path, for reading its content."""
    real_root = os.path.realpath(root)
    visited = {real_root}
    found: list[LocalFile] = []
    pending: list[tuple[str, str]] = [(os.fspath(root), "")]
    while pending:
        directory, prefix = pending.pop()
        with os.scandir(directory) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
        for entry in entries:
            if PARTIAL_MARKER in entry.name:
                continue
            relative = prefix + entry.name
            if entry.is_symlink():
                real = os.path.realpath(entry.path)
                if not is_within(real, real_root):
                    raise UnsafePathError(
                        f"{relative}: symlink leads outside the checkpoint directory (to {real})"
                    )
                if not os.path.exists(real):
                    log.warning("skipping broken symlink in checkpoint: %s", relative)
                    continue
                if os.path.isdir(real):
                    if real not in visited:
                        visited.add(real)
                        pending.append((entry.path, relative + "/"))
                    continue
                stat = os.stat(real)
                if not stat_mode.S_ISREG(stat.st_mode):
                    raise UnsafePathError(f"{relative}: not a regular file or directory")
                found.append(LocalFile(relative, Path(real), stat.st_size, stat.st_mode & 0o777))
            elif entry.is_dir(follow_symlinks=False):
                real = os.path.realpath(entry.path)
                if real not in visited:
                    visited.add(real)
                    pending.append((entry.path, relative + "/"))
            elif entry.is_file(follow_symlinks=False):
                stat = entry.stat(follow_symlinks=False)
                found.append(LocalFile(relative, Path(entry.path), stat.st_size, stat.st_mode & 0o777))
            else:
                raise UnsafePathError(f"{relative}: not a regular file or directory")
    found.sort(key=lambda file: file.relative_path)
    return found


def entries_in_place(root: Path) -> dict[str, Path]:
    """Every non-directory entry under `root` (files, symlinks, others) without following links:
    what deletion removes and what is left after it."""
    found: dict[str, Path] = {}
    for directory, subdirectories, files in os.walk(root, followlinks=False):
        relative_dir = os.path.relpath(directory, root)
        prefix = "" if relative_dir == "." else relative_dir.replace(os.sep, "/") + "/"
        # os.walk lists a symlink to a directory among the directories; it is an entry to remove.
        for name in [*files, *(d for d in subdirectories if os.path.islink(os.path.join(directory, d)))]:
            if PARTIAL_MARKER in name:
                continue
            found[prefix + name] = Path(directory) / name
    return found


def sizes_in_place(root: Path) -> dict[str, int]:
    """Path → size of `entries_in_place` (a symlink counts with its own size)."""
    sizes: dict[str, int] = {}
    for relative, path in entries_in_place(root).items():
        try:
            sizes[relative] = path.lstat().st_size
        except FileNotFoundError:
            continue
    return sizes


def prune_empty_directories(root: Path) -> None:
    """Remove directories under `root` left empty, and `root` itself when it ends up empty."""
    if not root.is_dir() or root.is_symlink():
        return
    for directory, _subdirectories, _files in os.walk(root, topdown=False, followlinks=False):
        try:
            os.rmdir(directory)
        except OSError:
            # Not empty (a file is left, or a writer is at work) or already gone: either way, done.
            continue
