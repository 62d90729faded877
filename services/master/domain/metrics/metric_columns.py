"""Intake's common batch held by column: one group's reports, every one with the same metric
names, every value a float (a training loop's loss, accuracy, learning rate...).

Read so by the wire (servicers/api/metrics_wire.py) without a tuple or a check per report, stored
by one COPY built straight from the columns (store/metric_rows.py), and folded into the trial's
summary by builtins over each column. Anything else (other value types, names that vary, several
groups, validations, resent reports) goes the general way, one Report per report
(domain/metrics/intake.py), which gives the same rows and summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from services.master.domain.kernel.errors import InvalidArgument


class FlatBatch(NamedTuple):
    group: str
    names: tuple[str, ...]
    seqs: list[int]
    steps: list[int]
    # Seconds since the epoch, as the trial's clock gave them.
    times: list[float]
    # Each report's metrics: as objects (for the general way) and as JSON text (for the COPY).
    values: list[dict[str, float]]
    texts: list[bytes]
    # One per name, in report order.
    columns: list[tuple[float, ...]]


def check(batch: FlatBatch) -> None:
    """The domain's rules for every report (metrics._check_report), over whole columns."""
    if not batch.seqs:
        return
    if not batch.group or "." in batch.group:
        raise InvalidArgument("reports[0].group: must be a non-empty name without '.'")
    if min(batch.steps) < 0:
        index = _first(batch.steps, lambda s: s < 0)
        raise InvalidArgument(f"reports[{index}].steps_completed: must be >= 0")
    if min(batch.seqs) <= 0:
        index = _first(batch.seqs, lambda s: s <= 0)
        raise InvalidArgument(f"reports[{index}].seq: must be >= 1")


def _first(values: list[int], wrong: Any) -> int:
    return next(i for i, v in enumerate(values) if wrong(v))


def fold(section: dict[str, dict[str, Any]], batch: FlatBatch) -> None:
    """What metrics._fold_batch gives for these reports (count, sum, min, max, mean, last of each
    name), from the columns: the same sums in the same order, so the same floats."""
    for name, column in zip(batch.names, batch.columns, strict=True):
        entry: dict[str, Any] = section.setdefault(name, {})
        add_numbers(entry, column)
        entry.update(last=column[-1], type="number")


def add_numbers(entry: dict[str, Any], numbers: Sequence[float]) -> None:
    """Fold finite `numbers` (at least one) into a summary entry's count, sum, min, max and mean."""
    count = int(entry.get("count", 0)) + len(numbers)
    total = sum(numbers, float(entry.get("sum", 0.0)))
    entry.update(
        count=count,
        sum=total,
        min=min(float(entry.get("min", numbers[0])), *numbers),
        max=max(float(entry.get("max", numbers[0])), *numbers),
        mean=total / count,
    )
