"""Warm start (Determined's searcher.source_trial_id / searcher.source_checkpoint_uuid): every trial
of the experiment starts from the named checkpoint, or from the latest checkpoint of the named trial,
as resolved when the experiment is created (Determined's checkpointFromTrialIDOrUUID). The trials
record it (`warmStartCheckpointUuid` on the trial, as the SDK and `det trial describe` show it) and
are handed it as their latest checkpoint until they have one of their own."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import CheckpointState, RunState
from services.master.store import models

_GONE = (RunState.DELETING, RunState.DELETED)


def source_checkpoint(s: Session, config: dict[str, Any]) -> str | None:
    """The UUID of the checkpoint the experiment's trials start from, or None for a cold start;
    InvalidArgument naming the field when the source does not exist or has no checkpoint."""
    searcher = config.get("searcher") or {}
    trial_id = searcher.get("source_trial_id")
    checkpoint_uuid = searcher.get("source_checkpoint_uuid")
    if trial_id is not None:
        trial = s.get(models.Trial, int(trial_id))
        experiment = s.get(models.Experiment, trial.experiment_id) if trial is not None else None
        if trial is None or experiment is None or experiment.state in _GONE:
            raise InvalidArgument(f"searcher.source_trial_id: no trial {trial_id}")
        if not trial.latest_checkpoint_uuid:
            raise InvalidArgument(
                f"searcher.source_trial_id: no checkpoint found for source trial {trial_id}"
            )
        return trial.latest_checkpoint_uuid
    if checkpoint_uuid is not None:
        checkpoint = s.get(models.Checkpoint, str(checkpoint_uuid))
        if checkpoint is None or checkpoint.state != CheckpointState.COMPLETED:
            raise InvalidArgument(
                f"searcher.source_checkpoint_uuid: no checkpoint found with UUID {checkpoint_uuid}"
            )
        return checkpoint.uuid
    return None
