"""Durations as the CLI's options take them: "90s", "30m", "1h30m", "1.5h", "7d", "2w"."""

from __future__ import annotations

import re

_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
# An option's value is short: a longer one is not a duration (and is never expanded).
MAX_CHARS = 64


def seconds_of(text: str, bare_seconds: bool = False) -> float | None:
    """The seconds `text` names, or None when it is not a duration; with `bare_seconds`, a plain
    number ("3600") counts as seconds."""
    text = text.strip()
    if not text or len(text) > MAX_CHARS:
        return None
    if bare_seconds and text.isdigit():
        return float(text)
    seconds, position = 0.0, 0
    for match in _PART.finditer(text):
        if match.start() != position:
            return None
        seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return seconds if position == len(text) and position > 0 else None
