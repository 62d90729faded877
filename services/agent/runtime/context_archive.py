"""Unpacking a model definition (a gzip'd tar from the master) into a container's directory, refusing
anything that could write outside it or create more than plain files, folders and inward links.

Refused, with the member named in the error: absolute paths, ".." anywhere in a path, the agent's
bookkeeping folder name, device files and FIFOs, links with absolute targets, and links (or paths
through links) that resolve outside the directory. The last check follows links already on disk
(Python's "data" extraction filter, applied per member), so chains of individually harmless links
cannot escape either.
"""

from __future__ import annotations

import posixpath
import tarfile
import zlib
from pathlib import Path

from cairn.context_limits import DEFAULT_SIZE_LIMIT_BYTES, MAX_MODEL_DEFINITION_FILES
from services.agent.runtime.protocol import META_DIR_NAME

# The master packs at most its max_model_definition_bytes (96 MiB by default) of files; an archive
# that claims twice that (room for a master configured higher) is refused before it fills a disk.
MAX_UNPACKED_BYTES = 2 * DEFAULT_SIZE_LIMIT_BYTES


class UnsafeArchiveError(ValueError):
    """The archive holds a member this unpacker refuses; nothing after it was extracted."""


def _clean_name(raw: str) -> str:
    name = raw
    while name.startswith("./"):
        name = name[2:]
    return name.rstrip("/")


def _check_member(member: tarfile.TarInfo) -> None:
    raw = member.name
    if raw.startswith("/") or posixpath.isabs(raw) or (len(raw) > 1 and raw[1] == ":"):
        raise UnsafeArchiveError(f"model definition member {raw!r}: absolute paths are not allowed")
    name = _clean_name(raw)
    parts = name.split("/")
    if ".." in parts:
        raise UnsafeArchiveError(f"model definition member {raw!r}: '..' is not allowed in paths")
    if parts[0] == META_DIR_NAME:
        raise UnsafeArchiveError(
            f"model definition member {raw!r}: {META_DIR_NAME} is reserved for the agent"
        )
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        raise UnsafeArchiveError(f"model definition member {raw!r}: device files and FIFOs are not allowed")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise UnsafeArchiveError(f"model definition member {raw!r}: unsupported member type")
    if member.issym() or member.islnk():
        target = member.linkname
        if target.startswith("/") or posixpath.isabs(target):
            raise UnsafeArchiveError(
                f"model definition member {raw!r}: link to absolute path {target!r} is not allowed"
            )
        base = posixpath.dirname(name) if member.issym() else ""
        resolved = posixpath.normpath(posixpath.join(base, target))
        if resolved == ".." or resolved.startswith("../"):
            raise UnsafeArchiveError(
                f"model definition member {raw!r}: link to {target!r} points outside the directory"
            )


def unpack_context(archive: Path, dest: Path) -> int:
    """Extract `archive` into `dest` (which must exist); the number of members extracted."""
    dest_real = dest.resolve()
    count = 0
    unpacked = 0
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                _check_member(member)
                # Checked from the header, before the member's bytes are written.
                unpacked += member.size
                if unpacked > MAX_UNPACKED_BYTES or count >= MAX_MODEL_DEFINITION_FILES:
                    raise UnsafeArchiveError(
                        f"model definition unpacks to more than {MAX_UNPACKED_BYTES} bytes or "
                        f"{MAX_MODEL_DEFINITION_FILES} members"
                    )
                if _clean_name(member.name) in ("", "."):
                    continue
                try:
                    tar.extract(member, dest_real, filter="data")
                except tarfile.FilterError as exc:
                    raise UnsafeArchiveError(
                        f"model definition member {member.name!r}: {_filter_reason(exc)}"
                    ) from exc
                count += 1
    except tarfile.ReadError as exc:
        raise UnsafeArchiveError(f"model definition is not a readable tar archive: {exc}") from exc
    except (EOFError, zlib.error, tarfile.TarError) as exc:
        raise UnsafeArchiveError(f"model definition archive is truncated or corrupt: {exc}") from exc
    return count


def _filter_reason(exc: tarfile.FilterError) -> str:
    if isinstance(exc, tarfile.LinkOutsideDestinationError | tarfile.OutsideDestinationError):
        return "resolves outside the directory (through a link)"
    if isinstance(exc, tarfile.AbsoluteLinkError | tarfile.AbsolutePathError):
        return "absolute paths are not allowed"
    if isinstance(exc, tarfile.SpecialFileError):
        return "device files and FIFOs are not allowed"
    return str(exc)
