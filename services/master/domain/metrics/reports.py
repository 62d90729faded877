"""What a trial reports, as the intake takes it: one report (a group, its steps, its metrics), the
two built-in groups and their names in a trial's summary, and the checks a report passes before
anything is stored."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, NamedTuple

from services.master.domain.kernel.errors import (
    InvalidArgument,
)

TRAINING = "training"


VALIDATION = "validation"


# Determined's names for the two built-in groups inside summary_metrics.
SUMMARY_KEYS = {TRAINING: "avg_metrics", VALIDATION: "validation_metrics"}


class Report(NamedTuple):
    # A tuple, not a frozen dataclass: intake makes one per report, thousands per batch, and a
    # frozen dataclass's __init__ costs a microsecond more each.
    group: str
    steps_completed: int
    metrics: dict[str, Any]
    report_time: datetime | None = None
    batch_metrics: list[Any] | None = None
    seq: int | None = None
    # Holds JSON values only (it came as JSON, which has no NaN or infinities): not sanitized again.
    plain: bool = False


def sanitize(value: Any) -> Any:
    """JSON has no NaN or infinity: store them as Determined does, as strings."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, dict):
        return {k: sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v) for v in value]
    return value


def check_report(index: int, report: Report) -> None:
    where = f"reports[{index}]"
    if not report.group or "." in report.group:
        raise InvalidArgument(f"{where}.group: must be a non-empty name without '.'")
    if report.steps_completed < 0:
        raise InvalidArgument(f"{where}.steps_completed: must be >= 0")
    if report.seq is not None and report.seq <= 0:
        raise InvalidArgument(f"{where}.seq: must be >= 1")
