"""The model definition of CreateExperimentRequest: a context directory as repeated File messages."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cairn.api.v1 import common_pb2
from cairn.client.errors import CairnError
from cairn.client.ignore_rules import IgnoreRules
from cairn.context_limits import DEFAULT_SIZE_LIMIT_BYTES, MAX_MODEL_DEFINITION_FILES

TAR_REGULAR = ord("0")
TAR_DIRECTORY = ord("5")
# Never useful to a trial and often large or numerous.
ALWAYS_SKIPPED_DIRECTORIES = frozenset({"__pycache__", ".git"})


class ModelDefinitionError(CairnError):
    pass


class ModelDefinitionTooLarge(ModelDefinitionError):
    def __init__(self, root: Path, total_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"model directory {root} holds {format_mib(total_bytes)} of files, over the limit of "
            f"{format_mib(limit_bytes)}; leave out data, checkpoints and outputs with a .detignore "
            f"(or .cairnignore) file in {root}"
        )
        self.total_bytes = total_bytes
        self.limit_bytes = limit_bytes


def format_mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


@dataclass(frozen=True)
class _Entry:
    relative: str
    absolute: Path
    is_dir: bool
    size: int
    mtime: int
    mode: int
    uid: int
    gid: int


def _walk(root: Path, rules: IgnoreRules) -> list[_Entry]:
    """Depth-first, each directory before its contents, names sorted for a stable order;
    ignored directories are not entered."""
    entries: list[_Entry] = []

    def visit(directory: Path, prefix: str) -> None:
        with os.scandir(directory) as listing:
            children = sorted(listing, key=lambda item: item.name)
        for child in children:
            relative = f"{prefix}{child.name}"
            # Directory symlinks are not followed: they may loop or point at whole datasets.
            is_dir = child.is_dir(follow_symlinks=False)
            if is_dir and child.name in ALWAYS_SKIPPED_DIRECTORIES:
                continue
            if not is_dir and not child.is_file(follow_symlinks=True):
                continue  # sockets, fifos, dangling or directory symlinks
            if rules.is_ignored(relative, is_dir):
                continue
            info = child.stat(follow_symlinks=True)
            entries.append(
                _Entry(
                    relative=relative,
                    absolute=Path(child.path),
                    is_dir=is_dir,
                    size=0 if is_dir else info.st_size,
                    mtime=int(info.st_mtime),
                    mode=stat.S_IMODE(info.st_mode),
                    uid=info.st_uid,
                    gid=info.st_gid,
                )
            )
            if is_dir:
                visit(Path(child.path), relative + "/")

    visit(root, "")
    return entries


def build_model_definition(
    directory: str | os.PathLike[str], limit_bytes: int = DEFAULT_SIZE_LIMIT_BYTES
) -> list[common_pb2.File]:
    """Every file and directory under `directory` not left out by its ignore files, with content.

    Sizes are summed from stat before anything is read, so an oversized directory fails fast.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ModelDefinitionError(f"model directory {root} is not a directory")
    entries = _walk(root, IgnoreRules.from_directory(root))
    if len(entries) > MAX_MODEL_DEFINITION_FILES:
        raise ModelDefinitionError(
            f"model directory {root} holds {len(entries)} files and folders, over the limit of "
            f"{MAX_MODEL_DEFINITION_FILES}; leave some out with a .detignore (or .cairnignore) file"
        )
    total = sum(entry.size for entry in entries)
    if total > limit_bytes:
        raise ModelDefinitionTooLarge(root, total, limit_bytes)
    files: list[common_pb2.File] = []
    read_total = 0
    for entry in entries:
        content = b"" if entry.is_dir else entry.absolute.read_bytes()
        read_total += len(content)
        if read_total > limit_bytes:  # a file grew while we were reading
            raise ModelDefinitionTooLarge(root, read_total, limit_bytes)
        files.append(
            common_pb2.File(
                path=entry.relative,
                type=TAR_DIRECTORY if entry.is_dir else TAR_REGULAR,
                content=content,
                mtime=entry.mtime,
                mode=entry.mode,
                uid=entry.uid,
                gid=entry.gid,
            )
        )
    return files


def model_definition_size(files: list[common_pb2.File]) -> int:
    return sum(len(item.content) for item in files)
