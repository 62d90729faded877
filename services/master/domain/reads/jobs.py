"""The job queue (Determined's `det job list`): every experiment with live allocations, with what
it asks for, what it holds and its place in its pool's queue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.master.domain.config.view import config_view
from services.master.domain.states import LIVE_ALLOCATION, PLACED_ALLOCATION
from services.master.store import models

JOB_ID_PREFIX = "exp-"


def experiment_job_id(experiment_id: int) -> str:
    return f"{JOB_ID_PREFIX}{experiment_id}"


def experiment_of_job(job_id: str) -> int | None:
    """The experiment whose job this is; None for an id that names no experiment's job."""
    number = job_id.removeprefix(JOB_ID_PREFIX)
    if not job_id.startswith(JOB_ID_PREFIX) or not number.isdigit() or len(number) > 18:
        return None
    return int(number)


@dataclass(frozen=True)
class JobRow:
    experiment_id: int
    name: str
    user_id: int
    username: str
    submitted_at: datetime
    resource_pool: str
    priority: int | None
    weight: float
    progress: float
    requested_slots: int
    allocated_slots: int
    allocation_ids: tuple[str, ...]
    # Whether any of its allocations holds slots (Determined's STATE_SCHEDULED).
    scheduled: bool
    # The workspace of the experiment's project.
    workspace_id: int


def queued_jobs(s: Session) -> list[JobRow]:
    """Jobs in submission order (the queue order of equal priorities)."""
    rows = s.execute(
        select(models.Allocation, models.Experiment, models.User.username, models.Project.workspace_id)
        .join(models.Trial, models.Trial.id == models.Allocation.trial_id)
        .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
        .join(models.User, models.User.id == models.Experiment.owner_id)
        .join(models.Project, models.Project.id == models.Experiment.project_id)
        .where(models.Allocation.state.in_(list(LIVE_ALLOCATION)))
        .order_by(models.Experiment.start_time, models.Experiment.id, models.Allocation.requested_at)
    ).all()
    grouped: dict[int, tuple[models.Experiment, str, int, list[models.Allocation]]] = {}
    for alloc, experiment, username, workspace_id in rows:
        grouped.setdefault(experiment.id, (experiment, str(username), int(workspace_id), []))[3].append(alloc)
    jobs = []
    for experiment, username, workspace_id, allocs in grouped.values():
        view = config_view(experiment.config)
        placed = [a for a in allocs if a.state in PLACED_ALLOCATION]
        jobs.append(
            JobRow(
                experiment_id=experiment.id,
                name=experiment.name,
                user_id=experiment.owner_id,
                username=username,
                submitted_at=experiment.start_time,
                resource_pool=experiment.resource_pool,
                priority=view.priority,
                weight=view.weight,
                progress=experiment.progress,
                requested_slots=sum(a.slots for a in allocs),
                allocated_slots=sum(a.slots for a in placed),
                allocation_ids=tuple(a.id for a in allocs),
                scheduled=bool(placed),
                workspace_id=workspace_id,
            )
        )
    return jobs
