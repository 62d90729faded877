"""One trial as the API shows it, and the facts about a trial that access checks and log streams
need (its experiment, its state, which trial an allocation runs)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.master.domain.kernel.errors import NotFound
from services.master.domain.reads.listings import TrialRow, trial_rows
from services.master.store import models


def trial_row(s: Session, trial_id: int) -> TrialRow:
    trial = s.get(models.Trial, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    return trial_rows(s, [trial])[0]


def trial_state(s: Session, trial_id: int) -> str | None:
    """The trial's state; None when there is no such trial."""
    state = s.scalar(select(models.Trial.state).where(models.Trial.id == trial_id))
    return None if state is None else str(state)


def trial_exists(s: Session, trial_id: int) -> bool:
    return trial_state(s, trial_id) is not None


def trial_of_allocation(s: Session, allocation_id: str) -> int | None:
    """The trial an allocation runs; None when there is no such allocation."""
    trial_id = s.scalar(select(models.Allocation.trial_id).where(models.Allocation.id == allocation_id))
    return None if trial_id is None else int(trial_id)
