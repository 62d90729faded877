"""A trial's reports read back: the metrics series, its workloads (reports and checkpoints, the way
Determined's CLI lists a trial's history), and the best searcher metric of an experiment."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

import orjson
from sqlalchemy import Connection, Text, bindparam, cast, select
from sqlalchemy.orm import Session

from services.master.domain.config import config_view
from services.master.domain.kernel.errors import NotFound
from services.master.store import models
from services.master.store.prepared_select import PreparedSelect


class ReportRow(NamedTuple):
    """A stored report as a MetricsReport carries it (values parsed, not ORM objects)."""

    id: int
    trial_id: int
    trial_run_id: int
    group_name: str
    steps_completed: int
    report_time: datetime
    metrics: Any
    batch_metrics: Any
    archived: bool


# A trial's learning curve is the most frequent read there is (the WebUI, the SDK): a statement
# built once, run on the cursor (store/prepared_select.py), its JSON columns read as text and
# parsed by orjson. Each of those cut a fifth or more of the read.
_REPORTS_OF_TRIAL = PreparedSelect(
    select(
        models.Metric.id,
        models.Metric.trial_id,
        models.Metric.trial_run_id,
        models.Metric.group_name,
        models.Metric.steps_completed,
        models.Metric.report_time,
        cast(models.Metric.metrics, Text),
        cast(models.Metric.batch_metrics, Text),
        models.Metric.archived,
    )
    .where(
        models.Metric.trial_id == bindparam("trial_id"),
        models.Metric.group_name == bindparam("group"),
        models.Metric.archived.is_(False),
    )
    .order_by(models.Metric.steps_completed, models.Metric.id)
)


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        # What orjson refuses and the column's own reader takes (a number past a double's range).
        return json.loads(text)


def reports_of_trial(connection: Connection, trial_id: int, group: str) -> list[ReportRow]:
    """The trial's current (not archived) reports of `group`, by step (on a connection from
    `Database.read_connection()`)."""
    return [
        ReportRow(row_id, trial, run, group_name, steps, at, _json(values), _json(batch), archived)
        for row_id, trial, run, group_name, steps, at, values, batch, archived in _REPORTS_OF_TRIAL.rows(
            connection, trial_id=trial_id, group=group
        )
    ]


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
