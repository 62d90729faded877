"""A trial's reports read back: the metrics series, its workloads (reports and checkpoints, the way
Determined's CLI lists a trial's history), and the best searcher metric of an experiment."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Row, bindparam, select
from sqlalchemy.orm import Session

from services.master.domain.config import config_view
from services.master.domain.errors import NotFound
from services.master.store import models

# What a MetricsReport carries, read as plain rows (not ORM objects: nothing here is changed, and
# building a mapped object per report cost more than the query). Built once with bound parameters:
# constructing the statement anew cost a fifth of a metrics read.
_REPORTS_OF_TRIAL = (
    select(
        models.Metric.id,
        models.Metric.trial_id,
        models.Metric.trial_run_id,
        models.Metric.group_name,
        models.Metric.steps_completed,
        models.Metric.report_time,
        models.Metric.metrics,
        models.Metric.batch_metrics,
        models.Metric.archived,
    )
    .where(
        models.Metric.trial_id == bindparam("trial_id"),
        models.Metric.group_name == bindparam("group"),
        models.Metric.archived.is_(False),
    )
    .order_by(models.Metric.steps_completed, models.Metric.id)
)


def reports_of_trial(s: Session, trial_id: int, group: str) -> Sequence[Row[Any]]:
    """The trial's current (not archived) reports of `group`, by step."""
    return s.execute(_REPORTS_OF_TRIAL, {"trial_id": trial_id, "group": group}).all()


def trial_history(
    s: Session, trial_id: int, groups: Iterable[str], with_checkpoints: bool
) -> tuple[list[models.Metric], list[models.Checkpoint]]:
    """The trial's current reports of `groups` and (when asked) its checkpoints; NotFound for an
    unknown trial."""
    if s.get(models.Trial, trial_id) is None:
        raise NotFound(f"trial {trial_id} not found")
    wanted = list(groups)
    reports = (
        list(
            s.scalars(
                select(models.Metric).where(
                    models.Metric.trial_id == trial_id,
                    models.Metric.group_name.in_(wanted),
                    models.Metric.archived.is_(False),
                )
            )
        )
        if wanted
        else []
    )
    checkpoints = (
        list(s.scalars(select(models.Checkpoint).where(models.Checkpoint.trial_id == trial_id)))
        if with_checkpoints
        else []
    )
    return reports, checkpoints


def best_searcher_metric(s: Session, experiment_id: int) -> float:
    """The best searcher metric any of the experiment's trials reported (NotFound when none has)."""
    exp = s.get(models.Experiment, experiment_id)
    if exp is None:
        raise NotFound(f"experiment {experiment_id} not found")
    values = [
        v
        for v in s.scalars(
            select(models.Trial.searcher_metric_value).where(models.Trial.experiment_id == exp.id)
        )
        if v is not None
    ]
    if not values:
        raise NotFound(f"experiment {experiment_id} has no validation metric yet")
    return min(values) if config_view(exp.config).smaller_is_better else max(values)
