"""What a notebook's config says about how it runs beyond a command's fields: Determined's
idle_timeout and notebook_idle_type, checked when the notebook is started."""

from __future__ import annotations

import re
from typing import Any

from services.master.domain.errors import InvalidArgument

# Determined's notebook_idle_type values; the first is its default.
IDLE_TYPES = ("kernels_or_terminals", "kernel_connections", "activity")
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


def idle_timeout_s(config: dict[str, Any]) -> float | None:
    """The config's idle_timeout in seconds; None when the notebook never times out."""
    value = config.get("idle_timeout")
    return None if value in (None, "") else parse_duration(value, "config.idle_timeout")


def idle_type(config: dict[str, Any]) -> str:
    value = config.get("notebook_idle_type") or IDLE_TYPES[0]
    if value not in IDLE_TYPES:
        raise InvalidArgument(f"config.notebook_idle_type: {value!r} is not one of {', '.join(IDLE_TYPES)}")
    return str(value)
