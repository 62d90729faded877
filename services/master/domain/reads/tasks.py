"""Tasks of every kind: their live allocations (Determined's task list), the tasks of a kind a user
lists (commands, notebooks, shells, TensorBoards), and what an agent fetches to start one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.master.domain.config.view import ProxyPort, proxy_ports_of
from services.master.domain.kernel.errors import NotFound
from services.master.domain.kernel.paging import Page, page_of
from services.master.domain.kernel.states import LIVE_ALLOCATION, TASK_ENDED, WS, TaskKind
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.kernel.task_ids import parse_trial_task_id
from services.master.domain.reads import visibility
from services.master.store import models


def live_allocations(
    s: Session, nsc: visibility.Workspaces = None, experiments: visibility.Workspaces = None
) -> list[tuple[models.Allocation, models.Task]]:
    """Every allocation not yet ended, whatever its task's kind, with its task; of the tasks the
    caller may read (visibility.tasks_seen; None: all)."""
    q = (
        select(models.Allocation, models.Task)
        .join(models.Task, models.Task.id == models.Allocation.task_id)
        .where(models.Allocation.state.in_(list(LIVE_ALLOCATION)))
        .order_by(models.Allocation.requested_at, models.Allocation.id)
    )
    return [(alloc, task) for alloc, task in s.execute(visibility.tasks_seen(q, nsc, experiments)).all()]


def trial_proxy_ports(s: Session, tasks: Iterable[models.Task]) -> dict[str, tuple[ProxyPort, ...]]:
    """The proxy ports of each trial's task among `tasks` (its experiment's
    environment.proxy_ports), by task id; tasks with none are left out."""
    by_experiment: dict[int, list[str]] = {}
    for t in tasks:
        if t.kind == TaskKind.TRIAL and t.experiment_id is not None:
            by_experiment.setdefault(t.experiment_id, []).append(t.id)
    found: dict[str, tuple[ProxyPort, ...]] = {}
    if not by_experiment:
        return found
    rows = s.execute(
        select(models.Experiment.id, models.Experiment.config).where(
            models.Experiment.id.in_(list(by_experiment))
        )
    )
    for experiment_id, config in rows:
        ports = proxy_ports_of((config or {}).get("environment") or {})
        if ports:
            found.update(dict.fromkeys(by_experiment[experiment_id], ports))
    return found


def task(s: Session, task_id: str, kind: TaskKind | None = None) -> models.Task:
    """The task (of `kind`, when given); NotFound naming it otherwise."""
    found = s.get(models.Task, task_id)
    if found is None or (kind is not None and found.kind != kind):
        raise NotFound(f"{(kind or 'task').lower()} {task_id} not found")
    return found


def task_ended(s: Session, task_id: str) -> bool:
    """Whether the task has ended (or is gone): nothing more will be logged for it."""
    found = s.get(models.Task, task_id)
    return found is None or found.state in TASK_ENDED


@dataclass(frozen=True)
class TaskRow:
    """A task as its list shows it: with its owner's name and its latest allocation."""

    task: models.Task
    username: str
    allocation: models.Allocation | None


def task_page(
    s: Session,
    kind: TaskKind,
    *,
    usernames: tuple[str, ...] = (),
    user_ids: tuple[int, ...] = (),
    workspace_id: int | None = None,
    newest_first: bool = False,
    offset: int = 0,
    limit: int = 0,
    visible: visibility.Workspaces = None,
) -> tuple[list[TaskRow], Page]:
    """One page of the tasks of `kind` (oldest first unless `newest_first`), of the owners named by
    username or id when any are, and where it lies, by Determined's rules for task lists (an
    offset below 0 counts from the end; limit 0 is all of them, as `det cmd list` expects). Only
    the page's rows are loaded, with their latest allocations."""
    start, ident = models.Task.start_time, models.Task.id
    q = select(models.Task, models.User.username).join(models.User, models.User.id == models.Task.owner_id)
    q = visibility.tasks(q.where(models.Task.kind == kind), visible)
    if usernames:
        q = q.where(models.User.username.in_(usernames))
    if user_ids:
        q = q.where(models.Task.owner_id.in_(user_ids))
    if workspace_id:
        # Determined answers a list of a workspace that is gone (or going) with a 404.
        workspace = s.get(models.Workspace, workspace_id)
        if workspace is None or workspace.state == WS.DELETING:
            raise NotFound(f"workspace '{workspace_id}' not found")
        q = q.where(models.Task.workspace_id == workspace_id)
    else:
        # A task whose workspace was deleted (killed by the deletion) is listed no more, as on
        # Determined; it is still read by its id.
        q = q.where(models.Task.workspace_id.is_not(None))
    total = int(s.scalar(select(func.count()).select_from(q.subquery())) or 0)
    page = page_of(total, offset, limit or -1)
    ordered = q.order_by(*((start.desc(), ident.desc()) if newest_first else (start, ident)))
    rows = s.execute(ordered.offset(page.start).limit(page.end - page.start)).all()
    latest = latest_allocations(s, [t.id for t, _ in rows])
    return [TaskRow(t, str(username), latest.get(t.id)) for t, username in rows], page


def task_row(s: Session, task_id: str, kind: TaskKind) -> TaskRow:
    found = task(s, task_id, kind)
    owner = s.get_one(models.User, found.owner_id)
    return TaskRow(found, owner.username, latest_allocations(s, [task_id]).get(task_id))


def latest_allocations(s: Session, task_ids: list[str]) -> dict[str, models.Allocation]:
    latest: dict[str, models.Allocation] = {}
    if not task_ids:
        return latest
    for alloc in s.scalars(
        select(models.Allocation)
        .where(models.Allocation.task_id.in_(task_ids))
        .order_by(models.Allocation.run_id)
    ):
        latest[alloc.task_id] = alloc
    return latest


def allocations_of_task(s: Session, task_id: str) -> list[models.Allocation]:
    """A task's allocations, the latest first (Determined's clients look at the first)."""
    return list(
        s.scalars(
            select(models.Allocation)
            .where(models.Allocation.task_id == task_id)
            .order_by(models.Allocation.run_id.desc())
        )
    )


def task_context_archive(s: Session, allocation_id: str) -> bytes | None:
    """The context (gzip'd tar) of a live allocation: its experiment's model definition for a
    trial, the task's context directory for any other task; None when the allocation has ended or
    does not exist (an agent asks only for what it was told to start)."""
    context = s.execute(
        select(models.TaskContext.archive)
        .join(models.Allocation, models.Allocation.task_id == models.TaskContext.task_id)
        .where(models.Allocation.id == allocation_id, models.Allocation.state != A.TERMINATED)
    ).first()
    if context is not None:
        return bytes(context[0])
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
