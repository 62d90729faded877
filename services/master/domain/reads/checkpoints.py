"""Checkpoints as the API shows them: each with its trial, experiment, and the metrics reported at
its step (what Determined's CheckpointTrainingMetadata carries)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.master.domain.config import config_view
from services.master.domain.kernel.errors import NotFound
from services.master.store import models


@dataclass(frozen=True)
class CheckpointRecord:
    checkpoint: models.Checkpoint
    trial: models.Trial | None
    experiment: models.Experiment | None
    # The latest report of each group at the checkpoint's step (empty when none).
    training_metrics: dict[str, Any]
    validation_metrics: dict[str, Any]

    @property
    def searcher_metric(self) -> float | None:
        """The searcher metric's value in the validation at the checkpoint's step."""
        if self.experiment is None:
            return None
        value = self.validation_metrics.get(config_view(self.experiment.config).searcher_metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return None


def _metrics_at(s: Session, trial_id: int, group: str, steps: int) -> dict[str, Any]:
    row = s.scalar(
        select(models.Metric)
        .where(
            models.Metric.trial_id == trial_id,
            models.Metric.group_name == group,
            models.Metric.steps_completed == steps,
            models.Metric.archived.is_(False),
        )
        .order_by(models.Metric.id.desc())
        .limit(1)
    )
    return dict(row.metrics) if row is not None else {}


def _record(s: Session, ck: models.Checkpoint) -> CheckpointRecord:
    trial = s.get(models.Trial, ck.trial_id)
    exp = s.get(models.Experiment, trial.experiment_id) if trial is not None else None
    return CheckpointRecord(
        checkpoint=ck,
        trial=trial,
        experiment=exp,
        training_metrics=_metrics_at(s, ck.trial_id, "training", ck.steps_completed),
        validation_metrics=_metrics_at(s, ck.trial_id, "validation", ck.steps_completed),
    )


def checkpoint(s: Session, uuid: str) -> CheckpointRecord:
    ck = s.get(models.Checkpoint, uuid)
    if ck is None:
        raise NotFound(f"checkpoint {uuid} not found")
    return _record(s, ck)


def checkpoints_of_trials(
    s: Session, trial_ids: Iterable[int], states: Iterable[str] = ()
) -> list[CheckpointRecord]:
    query = select(models.Checkpoint).where(models.Checkpoint.trial_id.in_(list(trial_ids)))
    wanted = list(states)
    if wanted:
        query = query.where(models.Checkpoint.state.in_(wanted))
    return [_record(s, ck) for ck in s.scalars(query)]


def checkpoints_of_experiment(
    s: Session, experiment_id: int, states: Iterable[str] = ()
) -> list[CheckpointRecord]:
    if s.get(models.Experiment, experiment_id) is None:
        raise NotFound(f"experiment {experiment_id} not found")
    trial_ids = list(s.scalars(select(models.Trial.id).where(models.Trial.experiment_id == experiment_id)))
    return checkpoints_of_trials(s, trial_ids, states)


def checkpoints_of_trial(s: Session, trial_id: int, states: Iterable[str] = ()) -> list[CheckpointRecord]:
    if s.get(models.Trial, trial_id) is None:
        raise NotFound(f"trial {trial_id} not found")
    return checkpoints_of_trials(s, [trial_id], states)


def storage_of(s: Session, uuid: str) -> dict[str, Any]:
    """The checkpoint_storage section the checkpoint was written to (its experiment's)."""
    record = checkpoint(s, uuid)
    if record.experiment is None:
        raise NotFound(f"checkpoint {uuid} belongs to no experiment")
    return config_view(record.experiment.config).checkpoint_storage
