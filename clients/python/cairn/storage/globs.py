"""Selecting files of a checkpoint by globs, the way Determined's partial deletion and download do.

Semantics follow `pathlib` globbing: `*`, `?` and `[...]` match within one path segment and `**`
matches any number of whole segments. A file is selected when a glob matches its path or one of its
parent directories (a matched directory brings everything under it), so `**/*` and `*` both select
every file, and `logs` selects everything under `logs/`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from cairn.storage.errors import UnsafePathError

# A selector gets a file's relative path and says whether it is wanted.
Selector = Callable[[str], bool]


def _segment_regex(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            start = i + 1
            negate = segment[start : start + 1] == "!"
            if negate:
                start += 1
            # A "]" right after the opening bracket is a member, as in fnmatch.
            end = segment.find("]", start + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = segment[start:end].replace("\\", "\\\\").replace("[", "\\[")
                if body.startswith("^"):
                    body = "\\" + body
                out.append(f"[^/{body}]" if negate else f"[{body}]")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def compile_glob(pattern: str) -> re.Pattern[str]:
    """A regex that fully matches the relative paths `pattern` names; refuses patterns that could
    name something outside the checkpoint."""
    if not pattern or not pattern.strip("/"):
        raise UnsafePathError(f"glob {pattern!r}: must not be empty")
    if pattern.startswith("/"):
        raise UnsafePathError(f"glob {pattern!r}: must be relative to the checkpoint directory")
    segments = [segment for segment in pattern.split("/") if segment not in ("", ".")]
    if ".." in segments:
        raise UnsafePathError(f"glob {pattern!r}: must not contain '..'")
    pieces: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            pieces.append(".*" if last else "(?:[^/]+/)*")
        else:
            pieces.append(_segment_regex(segment) + ("" if last else "/"))
    return re.compile("".join(pieces))


def _parents_and_self(relative_path: str) -> list[str]:
    parts = relative_path.split("/")
    return ["/".join(parts[: n + 1]) for n in range(len(parts))]


def glob_selector(globs: Iterable[str]) -> Selector | None:
    """A selector for files matching any of `globs`; None (everything) when there are none."""
    compiled = [compile_glob(glob) for glob in globs]
    if not compiled:
        return None

    def selected(relative_path: str) -> bool:
        candidates = _parents_and_self(relative_path)
        return any(regex.fullmatch(candidate) for regex in compiled for candidate in candidates)

    return selected


def check_globs(globs: Iterable[str]) -> list[str]:
    """The globs unchanged, after checking each (raises UnsafePathError naming the bad one)."""
    checked = list(globs)
    for glob in checked:
        compile_glob(glob)
    return checked
