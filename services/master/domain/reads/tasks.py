"""Live allocations as tasks (Determined's task list), and what an agent fetches to start one."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.master.domain.errors import NotFound
from services.master.domain.states import LIVE_ALLOCATION
from services.master.domain.states import AllocationState as A
from services.master.domain.task_ids import parse_trial_task_id
from services.master.store import models


def live_allocations(s: Session) -> list[tuple[models.Allocation, int, str]]:
    """Every allocation not yet ended, with its experiment's id and its trial's request id."""
    return [
        (alloc, int(experiment_id), str(request_id))
        for alloc, experiment_id, request_id in s.execute(
            select(models.Allocation, models.Trial.experiment_id, models.Trial.request_id)
            .join(models.Trial, models.Trial.id == models.Allocation.trial_id)
            .where(models.Allocation.state.in_(list(LIVE_ALLOCATION)))
        ).all()
    ]


def task_context_archive(s: Session, allocation_id: str) -> bytes | None:
    """The model definition (gzip'd tar) of a live allocation's experiment; None when the
    allocation has ended or does not exist (an agent asks only for what it was told to start)."""
    row = s.execute(
        select(models.ModelDefinition.archive)
        .join(models.Trial, models.Trial.experiment_id == models.ModelDefinition.experiment_id)
        .join(models.Allocation, models.Allocation.trial_id == models.Trial.id)
        .where(models.Allocation.id == allocation_id, models.Allocation.state != A.TERMINATED)
    ).first()
    return None if row is None else bytes(row[0])


def trial_of_task(s: Session, task_id: str) -> int:
    """The trial whose task this is (NotFound when none is)."""
    experiment_id, request_id = parse_trial_task_id(task_id)
    trial_id = s.scalar(
        select(models.Trial.id).where(
            models.Trial.experiment_id == experiment_id, models.Trial.request_id == request_id
        )
    )
    if trial_id is None:
        raise NotFound(f"task {task_id} not found")
    return int(trial_id)
