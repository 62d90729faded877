"""Budget accounting: from per-epoch validation reports to "best error so far vs. budget spent".

Every report stands for one epoch trained. Ordered by the time the trial measured it, the k-th
report (across all workers) means k epochs were consumed, k / max_epochs full trainings. The curve
steps down wherever a report beats the best error so far. Time to target is where the curve first
reaches the target; best at budget B is the curve's value once B full trainings were spent. Both
ignore wall time, so a busy machine slows a run without changing its numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class EpochReport:
    trial: str
    epoch: int
    error: float
    # Seconds since the epoch (time.time()) when the trial measured the error.
    wall_time: float


@dataclass(frozen=True)
class CurvePoint:
    """After `epochs` epochs in all, the best validation error seen was `best_error`."""

    epochs: int
    best_error: float


def best_so_far(reports: Iterable[EpochReport]) -> list[CurvePoint]:
    """One point per report, in the order the reports were measured (ties: trial, then epoch)."""
    ordered = sorted(reports, key=lambda r: (r.wall_time, r.trial, r.epoch))
    curve: list[CurvePoint] = []
    best = math.inf
    for count, report in enumerate(ordered, start=1):
        # min keeps `best` against a NaN error (a diverged model): NaN never counts as an improvement.
        best = min(best, report.error)
        curve.append(CurvePoint(count, best))
    return curve


def epochs_for(budget: float, max_epochs: int) -> int:
    """The whole number of epochs `budget` full trainings allow (rounding away float noise)."""
    return math.floor(budget * max_epochs + 1e-9)


def time_to_target(curve: Sequence[CurvePoint], target: float, max_epochs: int) -> float | None:
    """Full trainings spent when the best error first was <= target; None if it never was."""
    for point in curve:
        if point.best_error <= target:
            return point.epochs / max_epochs
    return None


def best_at_budget(curve: Sequence[CurvePoint], budget: float, max_epochs: int) -> float | None:
    """The best error once `budget` full trainings were spent; None before any report, or when the
    run stopped before spending that much (its value there is unknown)."""
    allowed = epochs_for(budget, max_epochs)
    if not curve or curve[-1].epochs < allowed:
        return None
    best: float | None = None
    for point in curve:
        if point.epochs > allowed:
            break
        best = point.best_error
    return best


def consumed_budget(curve: Sequence[CurvePoint], max_epochs: int) -> float:
    return curve[-1].epochs / max_epochs if curve else 0.0


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
