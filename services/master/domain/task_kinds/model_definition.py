"""Model definitions: the files of an experiment's context directory, stored as one gzip'd tarball."""

from __future__ import annotations

import hashlib
import io
import posixpath
import tarfile
import zlib
from dataclasses import dataclass

from cairn.context_limits import DEFAULT_SIZE_LIMIT_BYTES, MAX_MODEL_DEFINITION_FILES
from services.master.domain.kernel.errors import InvalidArgument

TAR_REGULAR = ord("0")
TAR_DIRECTORY = ord("5")


@dataclass(frozen=True)
class ContextFile:
    path: str
    type: int
    content: bytes
    mtime: int
    mode: int


def context_digest(archive: bytes) -> str:
    """What a start names a context archive by (TaskSpec.context_digest): its SHA-256, in hex."""
    return hashlib.sha256(archive).hexdigest()


def _safe_path(path: str, index: int) -> str:
    normalised = posixpath.normpath(path.replace("\\", "/"))
    if (
        not path
        or normalised.startswith("/")
        or normalised == ".."
        or normalised.startswith("../")
        or "\x00" in path
    ):
        raise InvalidArgument(
            f"model_definition[{index}].path: {path!r} must be a relative path inside the context"
        )
    return normalised


def _human(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def pack(files: list[ContextFile], limit_bytes: int) -> bytes:
    """A gzip'd tarball of `files`; refuses a context larger than `limit_bytes`."""
    if len(files) > MAX_MODEL_DEFINITION_FILES:
        raise InvalidArgument(
            f"model_definition: {len(files)} files and folders, "
            f"over the limit of {MAX_MODEL_DEFINITION_FILES}"
        )
    total = sum(len(f.content) for f in files)
    if total > limit_bytes:
        raise InvalidArgument(
            f"model_definition: the context directory holds {_human(total)}, over the limit of "
            f"{_human(limit_bytes)}; leave out data and outputs with a .detignore (or .cairnignore) file"
        )
    buffer = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for index, item in enumerate(files):
            path = _safe_path(item.path, index)
            if path in seen or path == ".":
                continue
            seen.add(path)
            info = tarfile.TarInfo(path)
            info.mtime = item.mtime
            if item.type == TAR_DIRECTORY:
                info.type = tarfile.DIRTYPE
                info.mode = item.mode & 0o7777 or 0o755
                tar.addfile(info)
            elif item.type in (TAR_REGULAR, 0):
                info.size = len(item.content)
                info.mode = item.mode & 0o7777 or 0o644
                tar.addfile(info, io.BytesIO(item.content))
            else:
                raise InvalidArgument(
                    f"model_definition[{index}].type: {item.type} is not a regular file (48) "
                    "or a directory (53)"
                )
    return buffer.getvalue()


def list_files(archive: bytes, limit_bytes: int = DEFAULT_SIZE_LIMIT_BYTES) -> list[tuple[str, int]]:
    """(path, size) of the regular files in a stored archive, read from the tar headers. The sizes
    and the member count are summed as the headers arrive, so an archive that claims more than
    `limit_bytes` or MAX_MODEL_DEFINITION_FILES stops being read there."""
    found: list[tuple[str, int]] = []
    total = members = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            for member in tar:
                members += 1
                total += member.size
                if members > MAX_MODEL_DEFINITION_FILES or total > limit_bytes:
                    raise InvalidArgument(
                        f"model_definition: unpacks to more than {_human(limit_bytes)} or "
                        f"{MAX_MODEL_DEFINITION_FILES} files"
                    )
                if member.isfile():
                    found.append((member.name, member.size))
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise InvalidArgument(f"model_definition: not a complete gzip'd tar archive ({exc})") from None
    return found
