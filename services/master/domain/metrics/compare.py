"""Metric series read back for charts and the SDK: the checks of Determined's deprecated per-group
streams (GetTrainingMetrics, GetValidationMetrics) and its CompareTrials (`/api/v1/trials/
time-series`): several trials' series of the named metrics, each group downsampled to a bounded
number of points that keep the curve's shape.

Every input is bounded before anything is read: the number of trials, of metric names, the points
per series, a filter's value lists.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.metrics.downsample import downsample_by
from services.master.domain.reads.metrics import ReportRow

MAX_STREAM_TRIALS = 1000
MAX_COMPARED_TRIALS = 100
MAX_METRIC_NAMES = 100
MAX_METRIC_NAME_CHARS = 255
MAX_DATAPOINTS = 10_000
# Determined's default when max_datapoints is 0.
DEFAULT_DATAPOINTS = 200
MAX_FILTER_VALUES = 1000
BATCHES = "batches"
TIME_COLUMNS = ("time", "end_time")


def check_stream_trials(trial_ids: Sequence[int]) -> list[int]:
    """The trials of a per-group stream, in id order: at least one, none twice, a bounded count."""
    if not trial_ids:
        raise InvalidArgument("trial_ids: at least one trial id is required")
    if len(trial_ids) > MAX_STREAM_TRIALS:
        raise InvalidArgument(f"trial_ids: at most {MAX_STREAM_TRIALS} trials; got {len(trial_ids)}")
    seen: set[int] = set()
    for trial_id in trial_ids:
        if trial_id in seen:
            raise InvalidArgument(f"trial_ids: trial {trial_id} is named twice")
        seen.add(trial_id)
    return sorted(trial_ids)


@dataclass(frozen=True)
class Range:
    """Bounds on one column; any may be None (no bound)."""

    lt: Any = None
    lte: Any = None
    gt: Any = None
    gte: Any = None
    incl: tuple[int, ...] = ()
    not_in: tuple[int, ...] = ()

    def admits(self, value: Any) -> bool:
        if value is None:
            return False
        if self.lt is not None and not value < self.lt:
            return False
        if self.lte is not None and not value <= self.lte:
            return False
        if self.gt is not None and not value > self.gt:
            return False
        if self.gte is not None and not value >= self.gte:
            return False
        if self.incl and value not in self.incl:
            return False
        return not (self.not_in and value in self.not_in)


@dataclass(frozen=True)
class SeriesFilter:
    """Determined's PolymorphicFilter: which column (batches, time, or a metric by name) and the
    ranges its values must be in."""

    column: str = BATCHES
    number_ranges: tuple[Range, ...] = ()
    time_range: Range | None = None

    def admits(self, row: ReportRow) -> bool:
        if self.column in TIME_COLUMNS:
            return self.time_range is None or self.time_range.admits(row.report_time)
        if self.column == BATCHES:
            value: Any = row.steps_completed
        else:
            raw = row.metrics.get(self.column) if isinstance(row.metrics, dict) else None
            value = _number(raw)
        return all(r.admits(value) for r in self.number_ranges)


def check_filter(
    name: str | None, double_range: Range | None, integer_range: Range | None, time_range: Range | None
) -> SeriesFilter:
    column = BATCHES if name is None or name == "" else name
    if len(column) > MAX_METRIC_NAME_CHARS:
        raise InvalidArgument(f"time_series_filter.name: at most {MAX_METRIC_NAME_CHARS} characters")
    listed = max(len(integer_range.incl), len(integer_range.not_in)) if integer_range is not None else 0
    if listed > MAX_FILTER_VALUES:
        raise InvalidArgument(
            f"time_series_filter.integer_range: at most {MAX_FILTER_VALUES} values in incl and in not_in"
        )
    if column in TIME_COLUMNS:
        if double_range is not None or integer_range is not None:
            raise InvalidArgument(f"time_series_filter: {column!r} is a time: filter it with time_range")
        return SeriesFilter(column=column, time_range=time_range)
    if time_range is not None:
        raise InvalidArgument(
            f"time_series_filter.time_range: {column!r} is not a time (time ranges filter 'time')"
        )
    ranges = tuple(r for r in (double_range, integer_range) if r is not None)
    return SeriesFilter(column=column, number_ranges=ranges)


@dataclass(frozen=True)
class CompareQuery:
    """A checked CompareTrials request: the groups and the metric names wanted in each."""

    trial_ids: tuple[int, ...]
    names_by_group: dict[str, tuple[str, ...]]
    max_datapoints: int
    start_batches: int
    end_batches: int | None
    series_filter: SeriesFilter = field(default_factory=SeriesFilter)


def _check_name(name: str, where: str) -> str:
    if not name or len(name) > MAX_METRIC_NAME_CHARS:
        raise InvalidArgument(f"{where}: a metric name of 1 to {MAX_METRIC_NAME_CHARS} characters")
    return name


def check_compare(
    *,
    trial_ids: Sequence[int],
    max_datapoints: int,
    metric_names: Sequence[str],
    metric_ids: Sequence[str],
    group: str,
    start_batches: int,
    end_batches: int,
    series_filter: SeriesFilter,
) -> CompareQuery:
    """The request checked and bounded; InvalidArgument naming the field otherwise. `group` is the
    group the request names (its metric_type already turned into one; "" when neither)."""
    if not trial_ids:
        raise InvalidArgument("trial_ids: at least one trial id is required")
    if len(trial_ids) > MAX_COMPARED_TRIALS:
        raise InvalidArgument(f"trial_ids: at most {MAX_COMPARED_TRIALS} trials; got {len(trial_ids)}")
    if max_datapoints < 0 or max_datapoints > MAX_DATAPOINTS:
        raise InvalidArgument(
            f"max_datapoints: between 0 (default {DEFAULT_DATAPOINTS}) and {MAX_DATAPOINTS};"
            f" got {max_datapoints}"
        )
    if start_batches < 0:
        raise InvalidArgument("start_batches: must not be negative")
    if end_batches < 0:
        raise InvalidArgument("end_batches: must not be negative (0: no end)")
    if metric_names and metric_ids:
        raise InvalidArgument("metric_names, metric_ids: give one or the other, not both")
    if len(metric_names) + len(metric_ids) > MAX_METRIC_NAMES:
        raise InvalidArgument(f"metric_names: at most {MAX_METRIC_NAMES} metrics")
    if len(group) > 64:
        raise InvalidArgument("group: at most 64 characters")
    names_by_group: dict[str, list[str]] = {}
    if metric_names:
        names = [_check_name(n, "metric_names") for n in metric_names]
        # No group named: training and validation both, as Determined answers old clients.
        for g in [group] if group else ["training", "validation"]:
            names_by_group[g] = names
    for metric_id in metric_ids:
        id_group, dot, name = metric_id.partition(".")
        if not dot or not id_group or len(id_group) > 64:
            raise InvalidArgument(f"metric_ids: {metric_id[:80]!r} is not group.metric_name")
        names_by_group.setdefault(id_group, []).append(_check_name(name, "metric_ids"))
    return CompareQuery(
        # In the order asked, a trial named twice answered twice, as Determined answers.
        trial_ids=tuple(trial_ids),
        names_by_group={g: tuple(dict.fromkeys(n)) for g, n in sorted(names_by_group.items())},
        max_datapoints=max_datapoints or DEFAULT_DATAPOINTS,
        start_batches=start_batches,
        end_batches=end_batches or None,
        series_filter=series_filter,
    )


@dataclass(frozen=True)
class SeriesPoint:
    batches: int
    time: datetime
    values: dict[str, Any]
    epoch: float | None


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def series(rows: Iterable[ReportRow], names: Sequence[str], query: CompareQuery) -> list[SeriesPoint]:
    """One group's series of `names` from its reports (in batches order): the reports in the batch
    window and the filter that hold at least one of the names, downsampled to the query's bound."""
    points: list[SeriesPoint] = []
    for row in rows:
        if row.steps_completed < query.start_batches:
            continue
        if query.end_batches is not None and row.steps_completed > query.end_batches:
            continue
        if not query.series_filter.admits(row):
            continue
        metrics = row.metrics if isinstance(row.metrics, dict) else {}
        values = {n: metrics[n] for n in names if n in metrics}
        if not values:
            continue
        points.append(
            SeriesPoint(int(row.steps_completed), row.report_time, values, _number(metrics.get("epoch")))
        )
    first = names[0] if names else ""

    def y(point: SeriesPoint) -> float:
        value = _number(point.values.get(first))
        return value if value is not None and math.isfinite(value) else 0.0

    return downsample_by(points, query.max_datapoints, x=lambda p: float(p.batches), y=y)
