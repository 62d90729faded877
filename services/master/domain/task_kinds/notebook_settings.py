"""What a notebook's config says about how it runs beyond a command's fields: Determined's
idle_timeout and notebook_idle_type, checked when the notebook is started."""

from __future__ import annotations

from typing import Any

from services.master.configuration.durations import parse_duration
from services.master.domain.kernel.errors import InvalidArgument

# Determined's notebook_idle_type values; the first is its default.
IDLE_TYPES = ("kernels_or_terminals", "kernel_connections", "activity")


def idle_timeout_s(config: dict[str, Any]) -> float | None:
    """The config's idle_timeout in seconds; None when the notebook never times out."""
    value = config.get("idle_timeout")
    return None if value in (None, "") else parse_duration(value, "config.idle_timeout")


def idle_type(config: dict[str, Any]) -> str:
    value = config.get("notebook_idle_type") or IDLE_TYPES[0]
    if value not in IDLE_TYPES:
        raise InvalidArgument(f"config.notebook_idle_type: {value!r} is not one of {', '.join(IDLE_TYPES)}")
    return str(value)
