"""The job queue (Determined's `det job list`): every experiment and every other task (commands,
notebooks, shells, TensorBoards, generic tasks) with live allocations, with what it asks for, what
it holds and its place in its pool's queue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from services.master.domain.config.view import config_view
from services.master.domain.kernel.states import (
    LIVE_ALLOCATION,
    PLACED_ALLOCATION,
    PREEMPTIBLE_KINDS,
    AllocationState,
    TaskKind,
)
from services.master.store import models

JOB_ID_PREFIX = "exp-"
# An experiment's job, as Determined names the kinds of job (jobv1.Type without its prefix).
EXPERIMENT = "EXPERIMENT"


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
    job_id: str
    # EXPERIMENT, or the task's kind (TaskKind: COMMAND, NOTEBOOK, SHELL, TENSORBOARD, GENERIC).
    kind: str
    # The experiment's id, or the task's.
    entity_id: str
    name: str
    user_id: int
    username: str
    submitted_at: datetime
    resource_pool: str
    priority: int | None
    weight: float
    progress: float | None
    requested_slots: int
    allocated_slots: int
    allocation_ids: tuple[str, ...]
    # Those waiting to be placed (PENDING).
    pending_ids: tuple[str, ...]
    # Whether any of its allocations holds slots (Determined's STATE_SCHEDULED).
    scheduled: bool
    workspace_id: int
    preemptible: bool

    @property
    def experiment_id(self) -> int | None:
        return int(self.entity_id) if self.kind == EXPERIMENT else None


def _live_by_owner(rows: list[tuple[models.Allocation, str]]) -> dict[str, list[models.Allocation]]:
    grouped: dict[str, list[models.Allocation]] = {}
    for alloc, key in rows:
        grouped.setdefault(key, []).append(alloc)
    return grouped


def queued_jobs(s: Session) -> list[JobRow]:
    """Every job with live allocations, in submission order (the queue order of equal priorities)."""
    return sorted([*_experiment_jobs(s), *_task_jobs(s)], key=lambda j: (j.submitted_at, j.kind, j.entity_id))


# The live allocations of experiments' trials, then those experiments apart: an experiment of
# 10,000 live trials is one job, and a row joining it to each of its allocations decoded its
# config, owner and project again for each.
_LIVE_TRIAL_ALLOCATIONS = (
    select(models.Allocation, models.Trial.experiment_id)
    .join(models.Trial, models.Trial.id == models.Allocation.trial_id)
    .where(models.Allocation.state.in_(list(LIVE_ALLOCATION)))
    .order_by(models.Allocation.requested_at)
)
_JOB_EXPERIMENTS = (
    select(models.Experiment, models.User.username, models.Project.workspace_id)
    .join(models.User, models.User.id == models.Experiment.owner_id)
    .join(models.Project, models.Project.id == models.Experiment.project_id)
    .where(models.Experiment.id.in_(bindparam("ids", expanding=True)))
    .order_by(models.Experiment.start_time, models.Experiment.id)
)


def _slots_held(placed: list[models.Allocation]) -> int:
    """The slots the allocations hold, each counted once: in an early hand-over the next
    allocation is placed on the slots the exiting one still runs on (allocations.release_early),
    and a one-slot cluster showed a job holding two."""
    held = {
        (placement["agent_id"], str(slot))
        for alloc in placed
        for placement in alloc.placements or []
        for slot in placement.get("slot_ids", [])
    }
    # An allocation placed without slot ids (none asked for) holds what it asked for, as before.
    return len(held) + sum(a.slots for a in placed if not any(p.get("slot_ids") for p in a.placements or []))


def _experiment_jobs(s: Session) -> list[JobRow]:
    allocations_of: dict[int, list[models.Allocation]] = {}
    for alloc, experiment_id in s.execute(_LIVE_TRIAL_ALLOCATIONS):
        allocations_of.setdefault(experiment_id, []).append(alloc)
    if not allocations_of:
        return []
    jobs = []
    for experiment, username, workspace_id in s.execute(_JOB_EXPERIMENTS, {"ids": list(allocations_of)}):
        allocs = allocations_of[experiment.id]
        view = config_view(experiment.config)
        placed = [a for a in allocs if a.state in PLACED_ALLOCATION]
        jobs.append(
            JobRow(
                job_id=experiment_job_id(experiment.id),
                kind=EXPERIMENT,
                entity_id=str(experiment.id),
                name=experiment.name,
                user_id=experiment.owner_id,
                username=str(username),
                submitted_at=experiment.start_time,
                resource_pool=experiment.resource_pool,
                priority=view.priority,
                weight=view.weight,
                progress=experiment.progress,
                requested_slots=sum(a.slots for a in allocs),
                allocated_slots=_slots_held(placed),
                allocation_ids=tuple(a.id for a in allocs),
                pending_ids=tuple(a.id for a in allocs if a.state == AllocationState.PENDING),
                scheduled=bool(placed),
                workspace_id=int(workspace_id),
                preemptible=True,
            )
        )
    return jobs


def _task_jobs(s: Session) -> list[JobRow]:
    """Tasks that are not trials (a trial's job is its experiment's)."""
    rows = s.execute(
        select(models.Allocation, models.Task, models.User.username)
        .join(models.Task, models.Task.id == models.Allocation.task_id)
        .join(models.User, models.User.id == models.Task.owner_id)
        .where(
            models.Allocation.state.in_(list(LIVE_ALLOCATION)),
            models.Task.kind != TaskKind.TRIAL,
        )
        .order_by(models.Task.start_time, models.Task.id)
    ).all()
    jobs = []
    for alloc, task, username in rows:
        placed = alloc.state in PLACED_ALLOCATION
        config = task.config or {}
        resources = config.get("resources") if isinstance(config.get("resources"), dict) else {}
        jobs.append(
            JobRow(
                job_id=task.job_id or task.id,
                kind=str(task.kind),
                entity_id=task.id,
                name=task.description or str(task.kind).lower(),
                user_id=task.owner_id,
                username=str(username),
                submitted_at=task.start_time,
                resource_pool=task.resource_pool,
                priority=task.priority,
                weight=float((resources or {}).get("weight") or 1.0),
                progress=None,
                requested_slots=alloc.slots,
                allocated_slots=alloc.slots if placed else 0,
                allocation_ids=(alloc.id,),
                pending_ids=(alloc.id,) if alloc.state == AllocationState.PENDING else (),
                scheduled=placed,
                workspace_id=int(task.workspace_id or 1),
                preemptible=task.kind in PREEMPTIBLE_KINDS,
            )
        )
    return jobs
