"""Arithmetic both halving modes share: rung lengths, reading a validation, progress.

Rung i of R needs max_time / divisor^(R-1-i) units (at least 1), so the top rung is max_time and each
rung below it is a divisor-th of the next. Float arithmetic follows Determined's (float64 power and
division, truncated), so the same config gives the same rungs.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.searcher_plugin.fields import is_number
from services.searcher.domain.methods.halving_config import Objective, TimeBudget

# What a trial that left without a result ranks with: behind every real result (Determined's
# math.MaxFloat64; finite, so snapshots stay JSON).
WORST_METRIC = sys.float_info.max
# steps_completed counts batches: it stands in for a `batches` entry the report did not carry.
STEPS_UNIT = "batches"


def power(base: float, exponent: int) -> float:
    """base**exponent, +inf where a float cannot hold it (a huge divisor) instead of raising."""
    try:
        return math.pow(base, exponent)
    except OverflowError:
        return math.inf


def rung_lengths(max_time: int, divisor: float, num_rungs: int) -> tuple[int, ...]:
    return tuple(max(1, int(max_time / power(divisor, num_rungs - 1 - index))) for index in range(num_rungs))


def top_count(results: int, divisor: float) -> int:
    """floor(results / divisor): how many of a rung's results rank in its top 1/divisor."""
    return int(results / divisor)


@dataclass(frozen=True)
class Reading:
    """What a validation says to a halving search: the signed metric (smaller is better) and how far
    the trial had trained."""

    metric: float
    time: int


def _signed_metric(raw: float, goal: Objective) -> float:
    # A NaN result (a diverged trial) ranks last; infinities are held to the float range so every
    # rung entry stays a finite, JSON-writable number.
    if math.isnan(raw):
        return WORST_METRIC
    return max(-WORST_METRIC, min(WORST_METRIC, goal.signed(raw)))


def read_validation(
    metrics: Mapping[str, Any], steps_completed: int, goal: Objective, time: TimeBudget
) -> Reading | None:
    """The reading, or None when the metrics lack the searcher metric or the time metric (as numbers).

    The time is the `time` unit's entry in the metrics; for `batches`, the report's steps_completed
    when the metrics carry no such entry.
    """
    raw: Any = metrics.get(goal.metric)
    if not is_number(raw):
        return None
    elapsed: Any = metrics.get(time.unit)
    if elapsed is None and time.unit == STEPS_UNIT:
        elapsed = steps_completed
    if not is_number(elapsed) or not math.isfinite(elapsed) or elapsed < 0:
        return None
    return Reading(_signed_metric(float(raw), goal), int(elapsed))


def halving_progress(
    rung0_results: int, trials_completed: int, invalid_trials: int, max_trials: int
) -> float:
    """Determined's measure: results in the bottom rung against max_trials with 20% headroom; once the
    bottom rung is full, at least the share of valid trials that have exited."""
    progress = rung0_results / (1.2 * max_trials)
    if rung0_results >= max_trials:
        progress = max(progress, (trials_completed - invalid_trials) / max_trials)
    return progress
