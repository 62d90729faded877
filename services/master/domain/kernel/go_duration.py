"""Go's duration strings ("90m", "1h30m", "1.5h", "300ms"), the form Determined's clients send
durations in (its master parses them with time.ParseDuration): a cluster message's `--duration`,
an access token's lifespan."""

from __future__ import annotations

import re
from datetime import timedelta

MAX_DURATION_CHARS = 64
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> timedelta:
    """The duration `text` names; ValueError (saying why) otherwise."""
    seconds = go_duration_seconds(text)
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"{text!r} is too long a duration") from None


def go_duration_seconds(text: str) -> float:
    """The seconds `text` names, however many (no date or timedelta bounds them yet: a caller
    that has its own bounds checks them first); ValueError (saying why) when it is not a duration."""
    if len(text) > MAX_DURATION_CHARS:
        raise ValueError(f"at most {MAX_DURATION_CHARS} characters")
    body = text
    sign = 1.0
    if body[:1] in "+-" and body:
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f"{text!r} is not a duration such as 90m, 24h or 1h30m")
    seconds = 0.0
    position = 0
    for match in _PART.finditer(body):
        if match.start() != position:
            break
        seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(body):
        raise ValueError(f"{text!r} is not a duration such as 90m, 24h or 1h30m (units: ns, us, ms, s, m, h)")
    return sign * seconds
