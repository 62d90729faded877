"""Exponential backoff with jitter, for reconnecting to the master."""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    """The n-th delay is drawn from [c/2, c] where c = initial * 2**n, at most `maximum`:
    0.25-0.5 s, 0.5-1 s, 1-2 s, ... 5-10 s by default.

    The random half spreads the reconnects of many agents after a master restart; the fixed half
    keeps the delay growing, so a master that stays away is not hammered."""

    def __init__(
        self,
        initial: float = 0.5,
        maximum: float = 10.0,
        rand: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self._initial = initial
        self._maximum = maximum
        self._rand = rand
        self._attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self._maximum, self._initial * (2**self._attempt))
        self._attempt = min(self._attempt + 1, 32)
        return self._rand(ceiling / 2, ceiling)

    def reset(self) -> None:
        self._attempt = 0
