"""Field paths as users read them in error messages: dots between keys, [i] for list indices."""

from __future__ import annotations

from collections.abc import Iterable


def format_path(parts: Iterable[str | int]) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def child_path(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def problem(path: str, message: str) -> str:
    # A problem with the whole document (empty path) is reported against "config".
    return f"{path or 'config'}: {message}"
