"""The seeded generator every random choice of a search comes from.

It reproduces Determined's `nprand` (itself numpy's legacy `RandomState`): MT19937 seeded with
`init_genrand`, 53-bit floats from two 32-bit draws, and masked rejection sampling for bounded
integers. Same seed, same draws, same order — which is what makes a search reproducible from
`reproducibility.experiment_seed`, and what lets a snapshot resume the stream exactly.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from cairn.searcher_plugin.errors import InvalidSnapshot

STATE_WORDS = 624
_UINT32 = 0xFFFFFFFF
# random.Random.getstate() format version that setstate() accepts.
_PY_STATE_VERSION = 3


def _init_genrand(seed: int) -> list[int]:
    key = [0] * STATE_WORDS
    value = seed & _UINT32
    for pos in range(STATE_WORDS):
        key[pos] = value
        value = (1812433253 * (value ^ (value >> 30)) + pos + 1) & _UINT32
    return key


class MersenneTwister:
    """MT19937 with numpy's seeding; the word stream runs on CPython's C implementation."""

    def __init__(self, seed: int) -> None:
        if not 0 <= seed <= _UINT32:
            raise ValueError(f"seed must be a 32-bit unsigned integer, got {seed}")
        self._mt = random.Random()
        # pos == 624: the first draw twists the freshly seeded key, exactly as numpy does.
        self._load(_init_genrand(seed), STATE_WORDS)

    def _load(self, key: list[int], pos: int) -> None:
        self._mt.setstate((_PY_STATE_VERSION, (*key, pos), None))

    # --- state -------------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        _, internal, _ = self._mt.getstate()
        return {"key": list(internal[:STATE_WORDS]), "pos": internal[STATE_WORDS]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], path: str = "rng") -> MersenneTwister:
        key = state.get("key")
        pos = state.get("pos")
        if (
            not isinstance(key, list)
            or len(key) != STATE_WORDS
            or not all(isinstance(w, int) and not isinstance(w, bool) and 0 <= w <= _UINT32 for w in key)
        ):
            raise InvalidSnapshot(f"{path}.key: must be {STATE_WORDS} unsigned 32-bit integers")
        if not isinstance(pos, int) or isinstance(pos, bool) or not 0 <= pos <= STATE_WORDS:
            raise InvalidSnapshot(f"{path}.pos: must be an integer in [0, {STATE_WORDS}]")
        rng = cls(0)
        rng._load(key, pos)
        return rng

    # --- draws -------------------------------------------------------------------------------

    def bits32(self) -> int:
        return self._mt.getrandbits(32)

    def bits64(self) -> int:
        upper = self.bits32()
        return (upper << 32) | self.bits32()

    def read(self, size: int) -> bytes:
        """`size` random bytes, each 32-bit word spent low byte first."""
        out = bytearray()
        while len(out) < size:
            out += self.bits32().to_bytes(4, "little")
        return bytes(out[:size])

    def _bits_limit(self, limit: int) -> int:
        """A uniform integer in [0, limit]: mask to the smallest covering power of two, retry above it."""
        if limit == 0:
            return 0
        mask = (1 << limit.bit_length()) - 1
        draw = self.bits32 if limit <= _UINT32 else self.bits64
        while True:
            value = draw() & mask
            if value <= limit:
                return value

    def intn(self, n: int) -> int:
        """A uniform integer in [0, n)."""
        if n <= 0:
            raise ValueError(f"intn needs n > 0, got {n}")
        if n - 1 > 0xFFFFFFFFFFFFFFFF:
            raise ValueError(f"intn supports at most 2**64 outcomes, got {n}")
        return self._bits_limit(n - 1)

    def unit_interval(self) -> float:
        """A uniform float in [0, 1) with 53 random bits."""
        a = self.bits32() >> 5
        b = self.bits32() >> 6
        return (a * 67108864.0 + b) / 9007199254740992.0

    def uniform(self, low: float, high: float) -> float:
        """A uniform float in [low, high)."""
        if high <= low:
            raise ValueError(f"uniform needs high > low, got [{low}, {high})")
        return low + (high - low) * self.unit_interval()
