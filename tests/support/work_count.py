"""Work measured as Python function calls, for tests that must show a step stays small whatever its
input would grow into (a bound checked before the input is expanded): a count of calls is the same
on an idle machine and on a loaded one, where a wall-clock bound flakes. Timings belong in bench/."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any


@dataclass
class CallCount:
    calls: int = 0


@contextmanager
def counting_calls() -> Iterator[CallCount]:
    """Counts the calls (Python functions and C functions called from Python) made in this thread
    inside the block: a parser walking a node, a decompressor reading a chunk, each counts once."""
    count = CallCount()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            count.calls += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield count
    finally:
        sys.setprofile(previous)
