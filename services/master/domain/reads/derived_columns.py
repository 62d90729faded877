"""The columns of Determined's run and experiment tables that are no column of Cairn's rows but are
worked out in SQL (so a filter and a sort can use them, as GetProjectColumns offers them): the
searcher's name and metric from the experiment's config, an experiment's number of trials, and the
completed checkpoints (count, bytes) of a run or of an experiment's runs. Each is a correlated
subquery or a JSON read, the same on PostgreSQL and SQLite."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import aliased

from services.master.domain.kernel.states import CheckpointState
from services.master.store import models


def searcher_field(name: str) -> Any:
    """The experiment's `searcher.<name>` as text (its config is expanded: always there)."""
    return models.Experiment.config[("searcher", name)].as_string()


def trial_count() -> Any:
    """How many trials the query's models.Experiment row has."""
    counted = aliased(models.Trial, name="counted")
    return (
        select(func.count(counted.id))
        .where(counted.experiment_id == models.Experiment.id)
        .correlate(models.Experiment)
        .scalar_subquery()
    )


def run_checkpoints(measure: str) -> Any:
    """The completed checkpoints of the query's models.Trial row: "count" or "size" (bytes)."""
    ck = models.Checkpoint
    value = func.count(ck.uuid) if measure == "count" else func.coalesce(func.sum(ck.size), 0)
    return (
        select(value)
        .where(ck.trial_id == models.Trial.id, ck.state == CheckpointState.COMPLETED)
        .correlate(models.Trial)
        .scalar_subquery()
    )


def experiment_checkpoints(measure: str) -> Any:
    """The completed checkpoints of every trial of the query's models.Experiment row."""
    ck, trial = models.Checkpoint, aliased(models.Trial, name="of_experiment")
    value = func.count(ck.uuid) if measure == "count" else func.coalesce(func.sum(ck.size), 0)
    return (
        select(value)
        .select_from(ck)
        .join(trial, trial.id == ck.trial_id)
        .where(trial.experiment_id == models.Experiment.id, ck.state == CheckpointState.COMPLETED)
        .correlate(models.Experiment)
        .scalar_subquery()
    )
