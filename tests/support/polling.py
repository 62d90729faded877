"""Bounded waiting: every wait in the tests has a deadline and says what it waited for."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # the thing waited for may not exist yet
            last_error = exc
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
