"""Writing a checkpoint streamed by the master (DownloadCheckpoint) into a local directory.

Each file is written to a temporary name and renamed into place when its last chunk arrives, so
an interrupted download never leaves a file that looks complete. Paths from the stream are checked
to stay inside the target directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from cairn.api.v1 import checkpoint_pb2
from cairn.client.errors import CairnError


class CheckpointDownloadError(CairnError):
    pass


@dataclass
class DownloadSummary:
    files: int = 0
    bytes: int = 0


def _target(root: Path, relative: str) -> Path:
    path = PurePosixPath(relative)
    if not relative or path.is_absolute() or ".." in path.parts:
        raise CheckpointDownloadError(f"the master sent an unsafe path {relative!r}; download stopped")
    return root.joinpath(*path.parts)


def write_checkpoint(
    chunks: Iterable[checkpoint_pb2.DownloadCheckpointChunk], directory: Path
) -> DownloadSummary:
    directory.mkdir(parents=True, exist_ok=True)
    summary = DownloadSummary()
    open_files: dict[str, tuple[IO[bytes], Path, int]] = {}
    try:
        for chunk in chunks:
            entry = open_files.get(chunk.path)
            if entry is None:
                if chunk.offset != 0:
                    raise CheckpointDownloadError(
                        f"{chunk.path}: first chunk starts at {chunk.offset}, not 0"
                    )
                target = _target(directory, chunk.path)
                target.parent.mkdir(parents=True, exist_ok=True)
                temporary = target.with_name(f".{target.name}.part")
                entry = (temporary.open("wb"), target, chunk.mode or 0o644)
                open_files[chunk.path] = entry
            handle, target, mode = entry
            if chunk.offset != handle.tell():
                raise CheckpointDownloadError(
                    f"{chunk.path}: chunk at {chunk.offset}, expected {handle.tell()}"
                )
            handle.write(chunk.data)
            summary.bytes += len(chunk.data)
            if chunk.eof:
                handle.close()
                temporary = target.with_name(f".{target.name}.part")
                os.chmod(temporary, mode & 0o777)
                temporary.replace(target)
                del open_files[chunk.path]
                summary.files += 1
        if open_files:
            raise CheckpointDownloadError(
                f"the stream ended before {', '.join(sorted(open_files))} was complete"
            )
    finally:
        for handle, target, _mode in open_files.values():
            handle.close()
            target.with_name(f".{target.name}.part").unlink(missing_ok=True)
    return summary
