"""Durations as Determined's configs write them: Go-style text ("30m", "1h30m", "250ms") or a whole
number of seconds."""

from __future__ import annotations

import re
from typing import Any

from services.common.errors import InvalidArgument

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration(value: Any, field: str) -> float:
    """Seconds of a Go-style duration ("30m", "1h30m", "45s"), or a whole number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    if isinstance(value, str) and value.strip():
        text = value.strip()
        parts = _DURATION_PART.findall(text)
        if parts and "".join(n + u for n, u in parts) == text:
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
            if seconds > 0:
                return seconds
    raise InvalidArgument(f'{field}: {value!r} is not a duration (write it like "30m", "1h" or "90s")')
