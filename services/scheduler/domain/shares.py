"""How fair share divides slots among siblings (the workspaces of a pool, the users of a
workspace, the jobs of a user): weighted max-min division with guarantees and caps, in whole slots.

Each sibling gets slots in proportion to its weight, never more than it wants (its demand, capped by
its quota's maximum) and, as far as the slots go, never less than its guarantee; what one does not
want is divided among the others ("water-filling"). Whole slots: the real shares are rounded by
largest remainder, so the shares always add up to exactly what is divided.

Recent usage lowers a weight as Slurm's classic fair-share factor does: a sibling that used a
fraction U of its siblings' recent usage while its weight is a fraction S of theirs weighs
w * 2^(-U/S): one that used nothing keeps its weight, one that used exactly its share has half.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Bisection steps for the water level: far below a slot's precision for any pool size.
_STEPS = 100


@dataclass(frozen=True)
class Claim:
    key: str
    # > 0.
    weight: float
    # Slots it wants: what it runs and what it waits for.
    demand: int
    # Slots guaranteed while it wants them.
    guaranteed: int = 0
    # Slots it may never exceed; None: no cap.
    cap: int | None = None

    @property
    def room(self) -> int:
        return self.demand if self.cap is None else min(self.demand, self.cap)


def usage_adjusted(weights: Mapping[str, float], usage: Mapping[str, float]) -> dict[str, float]:
    """Each weight times 2^(-U/S) (U: the sibling's fraction of its siblings' recent usage; S: its
    fraction of their weights). Weights must be > 0."""
    total_weight = sum(weights.values())
    total_usage = sum(max(0.0, usage.get(key, 0.0)) for key in weights)
    if total_usage <= 0 or total_weight <= 0:
        return dict(weights)
    adjusted = {}
    for key, weight in weights.items():
        used = max(0.0, usage.get(key, 0.0)) / total_usage
        share = weight / total_weight
        adjusted[key] = weight * math.pow(2.0, -used / share)
    return adjusted


def _level(claims: Sequence[Claim], floors: Mapping[str, float], target: float) -> dict[str, float]:
    """Real shares clamp(level * weight, floor, room) adding up to `target`."""

    def shares(level: float) -> dict[str, float]:
        return {c.key: min(float(c.room), max(floors[c.key], level * c.weight)) for c in claims}

    terms = [(float(c.room), floors[c.key], c.weight) for c in claims]

    def total(level: float) -> float:
        # sum(shares(level).values()) with min and max written out (each comparison picks the
        # value they would): a third of the time, and a session divides on most passes.
        return sum(
            room if (v := (x if (x := level * weight) > floor else floor)) >= room else v
            for room, floor, weight in terms
        )

    high = max((c.room / c.weight for c in claims), default=0.0)
    low = 0.0
    for _ in range(_STEPS):
        mid = (low + high) / 2
        before = (low, high)
        if total(mid) < target:
            low = mid
        else:
            high = mid
        if (low, high) == before:
            break  # the bounds are adjacent floats: every step left would leave them so
    return shares(high)


def _whole(real: Mapping[str, float], rooms: Mapping[str, int], target: int) -> dict[str, int]:
    """Whole slots by largest remainder: each share's floor, then one more slot to the largest
    fractions (ties by key) until they add up to `target`."""
    whole = {key: min(rooms[key], math.floor(value + 1e-9)) for key, value in real.items()}
    missing = target - sum(whole.values())
    order = sorted(real, key=lambda key: (-(real[key] - whole[key]), key))
    for key in order:
        if missing <= 0:
            break
        if whole[key] < rooms[key]:
            whole[key] += 1
            missing -= 1
    return whole


def divide(total: int, claims: Sequence[Claim]) -> dict[str, int]:
    """Whole-slot shares of `total` for `claims`, adding up to min(total, the sum of their rooms):
    guarantees first (scaled down when they promise more than there is), then weighted max-min."""
    claims = [c for c in claims if c.room > 0]
    if not claims or total <= 0:
        return {c.key: 0 for c in claims}
    rooms = {c.key: c.room for c in claims}
    target = min(total, sum(rooms.values()))
    promised = {c.key: float(min(c.guaranteed, c.room)) for c in claims}
    promised_total = sum(promised.values())
    if promised_total > target:
        scale = target / promised_total
        promised = {key: value * scale for key, value in promised.items()}
    return _whole(_level(claims, promised, float(target)), rooms, target)
