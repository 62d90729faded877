"""A trial's summary of what it reported (Determined's summary_metrics): count, sum, extremes, mean
and last of each metric per group, folded in as reports are stored, rebuilt from the rows that
remain when an earlier run's rows are archived; and the best validation by the searcher's metric."""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import select

from services.master.domain.config import config_view
from services.master.domain.kernel.context import Work
from services.master.domain.metrics import metric_columns
from services.master.domain.metrics.reports import SUMMARY_KEYS, VALIDATION, Report, sanitize
from services.master.store import models


def fold_into_summary(summary: dict[str, Any], group: str, metrics: dict[str, Any]) -> None:
    """Adds one report's values to `summary` (a trial's summary_metrics, being rebuilt), in place:
    count, sum, min, max, mean and last of each number, the last of anything else."""
    key = SUMMARY_KEYS.get(group, group)
    section: dict[str, dict[str, Any]] | None = summary.get(key)
    if section is None:
        section = summary[key] = {}
    for name, value in metrics.items():
        entry: dict[str, Any] | None = section.get(name)
        if entry is None:
            entry = section[name] = {}
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            number = float(value)
            count = int(entry.get("count", 0)) + 1
            total = float(entry.get("sum", 0.0)) + number
            entry.update(
                count=count,
                sum=total,
                min=min(float(entry.get("min", number)), number),
                max=max(float(entry.get("max", number)), number),
                mean=total / count,
                last=value,
                type="number",
            )
        else:
            entry.update(last=sanitize(value), type="string" if isinstance(value, str) else "other")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fold_batch(summary: dict[str, Any], new: list[tuple[Report, dict[str, Any]]]) -> None:
    """What folding each report in turn would give (fold_into_summary), one metric at a time
    over the whole batch: counts, sums and extremes by builtins, the last value as the last."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for item, metrics in new:
        by_group.setdefault(item.group, []).append(metrics)
    for group, batch in by_group.items():
        key = SUMMARY_KEYS.get(group, group)
        section: dict[str, dict[str, Any]] = summary.setdefault(key, {})
        names: dict[str, Any] = {}  # every name, in the order they first appear
        for metrics in batch:
            names.update(metrics)
        for name in names:
            values = [metrics[name] for metrics in batch if name in metrics]
            # The common column holds floats only (finite: NaN and infinities were made strings
            # before this); anything else takes the full check.
            numbers = [v for v in values if type(v) is float]
            if len(numbers) != len(values):
                numbers = [float(v) for v in values if is_number(v)]
            entry: dict[str, Any] = section.setdefault(name, {})
            if numbers:
                metric_columns.add_numbers(entry, numbers)
            last = values[-1]
            if is_number(last):
                entry.update(last=last, type="number")
            else:
                entry.update(last=sanitize(last), type="string" if isinstance(last, str) else "other")


def summary_copy(trial: models.Trial) -> dict[str, Any]:
    """A deep enough copy of the trial's summary to fold reports into: the column is replaced, never
    mutated in place, so the ORM sees the change."""
    return {
        key: {name: dict(entry) for name, entry in section.items()} if isinstance(section, dict) else section
        for key, section in (trial.summary_metrics or {}).items()
    }


def update_summary(trial: models.Trial, group: str, metrics: dict[str, Any]) -> None:
    summary = summary_copy(trial)
    fold_into_summary(summary, group, metrics)
    trial.summary_metrics = summary


def searcher_metric(exp: models.Experiment, metrics: dict[str, Any]) -> float | None:
    name = config_view(exp.config).searcher_metric
    value = metrics.get(name) if name else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def recompute_summary(w: Work, trial: models.Trial, exp: models.Experiment) -> None:
    """After archiving, rebuild the trial's summary and best validation from what remains."""
    summary: dict[str, Any] = {}
    trial.searcher_metric_value = None
    trial.best_validation_id = None
    trial.latest_validation_id = None
    smaller = config_view(exp.config).smaller_is_better
    rows = w.session.execute(
        select(models.Metric.id, models.Metric.group_name, models.Metric.metrics)
        .where(models.Metric.trial_id == trial.id, models.Metric.archived.is_(False))
        .order_by(models.Metric.id)
    )
    for row in rows:
        fold_into_summary(summary, row.group_name, row.metrics)
        if row.group_name == VALIDATION:
            trial.latest_validation_id = row.id
            value = searcher_metric(exp, row.metrics)
            best: float | None = trial.searcher_metric_value
            if value is not None and (best is None or (value < best if smaller else value > best)):
                trial.searcher_metric_value, trial.best_validation_id = value, row.id
    trial.summary_metrics = summary
