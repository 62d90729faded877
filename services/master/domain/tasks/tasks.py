"""The one lifecycle of tasks that are not trials, whatever their kind (commands, notebooks, shells,
TensorBoards, generic tasks): created with their config and context directory, run as allocations of
the one scheduler, killed, paused and unpaused, reprioritised, and ended when their allocation ends.
What differs between kinds is read from the kind's description (task_kinds/registry.py), never
asked here: its config checks and defaults, what a launch names beside its config, what is stored
beside the task.

Every state change goes through `transition` (states.TASK_TRANSITIONS). Like the trial lifecycle,
this module commands allocations and hears of their ends through the context's hooks (wiring.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.allocations import allocations, stops
from services.master.domain.config import ConfigError
from services.master.domain.config.bounds import check_json_value
from services.master.domain.config.image_pull import image_pull_problem
from services.master.domain.config.policies import check_config_policy
from services.master.domain.config.template_merge import merge_template
from services.master.domain.identity import access, scopes
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from services.master.domain.kernel.states import (
    PREEMPTIBLE_KINDS,
    TASK_ENDED,
    WS,
    TaskKind,
    TaskState,
    check_task,
)
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.kernel.topics import task_topic
from services.master.domain.reads import templates as template_reads
from services.master.domain.task_kinds import model_definition, registry, tensorboard_sources
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.workspaces import pool_bindings
from services.master.store import models

log = get_logger(__name__)

T = TaskState
Outcome = allocations.Outcome


@dataclass
class TaskRequest:
    """What a user asks to run: a task of `kind` with its config and context directory, and what
    the launch names beside them (a TensorBoard's experiments and trials)."""

    kind: TaskKind
    config: dict[str, Any]
    files: list[ContextFile] = field(default_factory=list)
    workspace_id: int | None = None
    project_id: int | None = None
    parent_id: str | None = None
    forked_from: str | None = None
    inherit_context: bool = False
    no_pause: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)
    # A config template to merge the config over (Determined's `--template`), as experiments do.
    template_name: str | None = None


def transition(
    ctx: MasterContext,
    w: Work,
    task: models.Task,
    target: TaskState,
    reason: str,
    *,
    continuing: bool = False,
) -> None:
    """Every change of a task's state, a trial's task's included: checked against the table,
    stamped, logged and published. `continuing`: a trial's task reopened with its trial
    (states.TASK_CONTINUE_TRANSITIONS)."""
    previous = task.state
    check_task(previous, target, continuing=continuing)
    task.state = target
    if continuing:
        task.end_time = None
    if target in TASK_ENDED:
        task.end_time = utcnow()
    topic = task_topic(task.id)
    w.later(lambda: ctx.topics.publish(topic))
    log.info("task state", task_id=task.id, previous=previous, state=target.value, reason=reason)


def load(w: Work, task_id: str, kind: TaskKind | None = None) -> models.Task:
    task = w.session.get(models.Task, task_id)
    if task is None or (kind is not None and task.kind != kind):
        raise NotFound(f"{(kind or 'task').lower()} {task_id} not found")
    return task


def check_can_modify(s: Session, principal: Principal, task: models.Task) -> None:
    """Not found unless the caller may see the task; refused unless they may change it (a trial's
    by its experiment's rules: identity/access.py)."""
    permission = Permission.UPDATE_EXPERIMENT if task.experiment_id is not None else Permission.UPDATE_NSC
    access.check_task(s, principal, task, permission)


def live_allocation(w: Work, task: models.Task) -> models.Allocation | None:
    return w.session.scalar(
        select(models.Allocation)
        .where(models.Allocation.task_id == task.id, models.Allocation.state != A.TERMINATED)
        .order_by(models.Allocation.run_id.desc())
        .limit(1)
    )


def _slots(config: dict[str, Any]) -> int:
    resources = config.get("resources") or {}
    slots = resources.get("slots", 1) if isinstance(resources, dict) else 1
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 0:
        raise InvalidArgument(f"config.resources.slots: {slots!r} is not a whole number of slots (0 or more)")
    return slots


def _pool(
    w: Work, ctx: MasterContext, config: dict[str, Any], slots: int, workspace: models.Workspace
) -> str:
    """The pool asked for; else, as Determined's defaults do, the workspace's (then the cluster's)
    auxiliary pool for a zero-slot task and its compute pool for any other. It must be open to the
    workspace (bound to it, or to none)."""
    resources = config.get("resources") or {}
    pool = resources.get("resource_pool") if isinstance(resources, dict) else None
    if not pool:
        workspace_default = workspace.default_aux_pool if slots == 0 else workspace.default_compute_pool
        cluster_aux = ctx.settings.default_aux_pool if slots == 0 else None
        pool = workspace_default or cluster_aux or ctx.settings.default_pool
    if not any(p.name == pool for p in ctx.settings.pools):
        raise InvalidArgument(f"config.resources.resource_pool: no resource pool {pool!r}")
    pool_bindings.check_available(w.session, str(pool), workspace.id, "config.resources.resource_pool")
    return str(pool)


def _check_entrypoint(config: dict[str, Any]) -> None:
    entrypoint = config.get("entrypoint")
    if isinstance(entrypoint, str) and entrypoint.strip():
        return
    if isinstance(entrypoint, list) and entrypoint and all(isinstance(p, str) for p in entrypoint):
        return
    raise InvalidArgument("config.entrypoint: a command to run is required (a string or a list of strings)")


def _check_config(ctx: MasterContext, principal: Principal, config: dict[str, Any]) -> None:
    """What experiment configs are held to holds for tasks too: bounded (depth, size, numbers),
    an entrypoint, and the host-reach policy (bind mounts, capabilities) for `principal`."""
    try:
        check_json_value(config, "config")
    except ConfigError as exc:
        raise InvalidArgument(str(exc)) from None
    _check_entrypoint(config)
    _check_sections(config)
    check_config_policy(ctx.settings, principal, config)


# A task config's sections and the shape each must have where it is given (Determined's schema);
# checked before anything reads into them.
_SECTION_SHAPES: dict[str, tuple[type, str]] = {
    "resources": (dict, "a mapping"),
    "environment": (dict, "a mapping"),
    "bind_mounts": (list, "a list"),
}


def _check_sections(config: dict[str, Any]) -> None:
    for key, (shape, named) in _SECTION_SHAPES.items():
        value = config.get(key)
        if value is not None and not isinstance(value, shape):
            raise InvalidArgument(f"config.{key}: must be {named}, not {type(value).__name__}")
    problem = image_pull_problem(config.get("environment") or {})
    if problem:
        raise InvalidArgument(problem)


def _context(w: Work, ctx: MasterContext, request: TaskRequest) -> bytes:
    """The task's context directory: its own files, else (fork, inherit_context) those of the task
    it comes from."""
    if request.files:
        return model_definition.pack(request.files, ctx.settings.max_model_definition_bytes)
    source = request.forked_from or (request.parent_id if request.inherit_context else None)
    if source:
        found = w.session.get(models.TaskContext, source)
        if found is not None:
            return bytes(found.archive)
    return model_definition.pack([], 0)


def _description(kind: TaskKind, config: dict[str, Any]) -> str:
    if config.get("description"):
        return str(config["description"])[:512]
    entrypoint = config.get("entrypoint")
    text = entrypoint if isinstance(entrypoint, str) else " ".join(str(p) for p in entrypoint or [])
    return f"{kind.title()} ({text[:80]})"


# No template has a longer name (templates' own bound is smaller): refused before the lookup.
MAX_TEMPLATE_NAME = 1024


def _template_config(s: Session, name: str) -> dict[str, Any]:
    if len(name) > MAX_TEMPLATE_NAME:
        raise NotFound(f"template: no template named {name[:64]!r}...")
    return template_reads.template(s, name).config


def launch_config(ctx: MasterContext, request: TaskRequest) -> dict[str, Any]:
    """The config a task of the request's kind runs with (what a notebook launch previews): the
    kind's checks of what the launch names (reading what it names) and of its config, its
    launcher and defaults."""
    kind = registry.description(request.kind)
    arguments = request.arguments
    config = request.config
    with ctx.db.read() as s:
        if kind.check_arguments is not None:
            arguments = kind.check_arguments(s, arguments)
        if request.template_name:
            # The template under the config, before the kind's launcher and defaults: the config's
            # values win, as Determined merges a template into a command's config.
            config = merge_template(config, _template_config(s, request.template_name))
    return kind.config_for(config, arguments)


def _check_may_launch(ctx: MasterContext, principal: Principal, request: TaskRequest) -> None:
    """Before the request is looked at: the caller may create tasks where it goes (its project's
    workspace, its workspace, else Uncategorized) and read the task it forks."""
    with ctx.db.read() as s:
        workspace_id = request.workspace_id or models.UNCATEGORIZED_WORKSPACE_ID
        if request.project_id is not None:
            project = s.get(models.Project, request.project_id)
            if project is None:
                raise NotFound(f"project {request.project_id} not found")
            workspace_id = project.workspace_id
        access.check_readable(
            principal, Permission.VIEW_WORKSPACE, workspace_id, f"workspace '{workspace_id}'", s
        )
        access.check(
            principal, Permission.CREATE_NSC, workspace_id, f"start tasks in workspace {workspace_id}", s
        )
        if request.forked_from:
            forked = s.get(models.Task, request.forked_from)
            if forked is not None:
                view = Permission.VIEW_EXPERIMENT_METADATA if forked.experiment_id else Permission.VIEW_NSC
                what = f"task {forked.id}"
                access.check_readable(principal, view, scopes.of_task(s, forked), what, s)


def _check_may_show(ctx: MasterContext, principal: Principal, config: dict[str, Any]) -> None:
    """A TensorBoard shows only experiments its launcher may read the artifacts of."""
    experiment_ids, trial_ids = tensorboard_sources.shown_ids(config)
    if not experiment_ids and not trial_ids:
        return
    with ctx.db.read() as s:
        if trial_ids:
            experiment_ids = [
                *experiment_ids,
                *s.scalars(select(models.Trial.experiment_id).where(models.Trial.id.in_(trial_ids))),
            ]
        for experiment_id in dict.fromkeys(experiment_ids):
            workspace_id = scopes.of_experiment_id(s, experiment_id)
            what = f"experiment_ids: experiment {experiment_id}"
            access.check_readable(principal, Permission.VIEW_EXPERIMENT_ARTIFACTS, workspace_id, what, s)


def create(ctx: MasterContext, principal: Principal, request: TaskRequest) -> str:
    """A new task, stored with its context and what its kind keeps beside it, and asking for its
    first allocation; its id."""
    kind = registry.description(request.kind)
    if principal.user_id is None:
        raise PermissionDenied("only users start tasks")
    _check_may_launch(ctx, principal, request)
    config = launch_config(ctx, request)
    _check_may_show(ctx, principal, config)
    with ctx.unit_of_work() as w:
        if request.forked_from:
            forked = load(w, request.forked_from)
            config = {**(forked.config or {}), **config}
        _check_config(ctx, principal, config)
        slots = _slots(config)
        workspace_id = request.workspace_id or models.UNCATEGORIZED_WORKSPACE_ID
        if request.project_id is not None:
            project = w.session.get(models.Project, request.project_id)
            if project is None:
                raise NotFound(f"project {request.project_id} not found")
            workspace_id = project.workspace_id
        workspace = w.session.get(models.Workspace, workspace_id)
        # Determined answers a launch into an archived workspace as into a missing one (404, its
        # text), and so into one being deleted.
        if workspace is None or workspace.state == WS.DELETING or workspace.archived:
            raise NotFound(f"workspace '{workspace_id}' not found")
        priority = (config.get("resources") or {}).get("priority")
        task_id = str(uuid.uuid4())
        task = models.Task(
            id=task_id,
            kind=request.kind,
            owner_id=principal.user_id,
            description=_description(request.kind, config),
            config=config,
            job_id=task_id,
            state=T.ACTIVE,
            start_time=utcnow(),
            resource_pool=_pool(w, ctx, config, slots, workspace),
            slots=slots,
            priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else None,
            run_id=0,
            workspace_id=workspace.id,
            project_id=request.project_id,
            parent_id=request.parent_id,
            forked_from=request.forked_from,
            no_pause=request.no_pause,
        )
        archive = _context(w, ctx, request)
        w.session.add(task)
        w.session.add(
            models.TaskContext(
                task_id=task_id,
                archive=archive,
                size=len(archive),
                digest=model_definition.context_digest(archive),
            )
        )
        w.session.flush()
        if kind.store_beside is not None:
            kind.store_beside(w, task)
        allocations.request_for_task(ctx, w, task)
        log.info(
            "task created", task_id=task_id, kind=request.kind.value, slots=slots, pool=task.resource_pool
        )
    return task_id


Change = Callable[[MasterContext, Work, models.Task], None]


def change_by_user(
    ctx: MasterContext, principal: Principal, task_id: str, kind: TaskKind, change: Change
) -> None:
    """`principal` (its owner or an admin) makes `change` (kill, pause, unpause) to task `task_id`
    of `kind`."""
    with ctx.unit_of_work() as w:
        task = load(w, task_id, kind)
        check_can_modify(w.session, principal, task)
        change(ctx, w, task)


def kill_by_user(ctx: MasterContext, principal: Principal, task_id: str, kind: TaskKind) -> None:
    """`principal` (its owner or an admin) kills task `task_id` of `kind`."""
    change_by_user(ctx, principal, task_id, kind, kill)


def kill(ctx: MasterContext, w: Work, task: models.Task) -> None:
    """Kill always wins: the live allocation is killed and the task ends CANCELED with it."""
    if task.state in TASK_ENDED:
        return
    alloc = live_allocation(w, task)
    if alloc is None:
        transition(ctx, w, task, T.CANCELED, "killed while nothing ran")
        return
    if task.state != T.STOPPING_CANCELED:
        transition(ctx, w, task, T.STOPPING_CANCELED, "kill requested")
    stops.request_kill(ctx, w, alloc, grace_seconds=ctx.settings.kill_grace_s, reason="task killed")


# Determined's bounds on a task's priority (resources.priority: 1 to 99, a lower number first).
MIN_PRIORITY, MAX_PRIORITY = 1, 99


def check_priority(priority: int) -> None:
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidArgument(
            f"priority: {priority} is out of range; a priority is {MIN_PRIORITY} to {MAX_PRIORITY}"
        )


def set_priority(
    ctx: MasterContext, principal: Principal, task_id: str, kind: TaskKind, priority: int
) -> None:
    """`principal` (its owner or an admin) moves task `task_id` in its pool's queue: the priority is
    kept in its config (a restart or fork keeps it) and its live allocation takes it at the next
    scheduling pass, where a running one may now preempt or be preempted by priority."""
    check_priority(priority)
    with ctx.unit_of_work() as w:
        task = load(w, task_id, kind)
        check_can_modify(w.session, principal, task)
        if task.state in TASK_ENDED:
            raise FailedPrecondition(f"{kind.lower()} {task_id} has ended: its priority no longer matters")
        config = dict(task.config or {})
        config["resources"] = {**(config.get("resources") or {}), "priority": priority}
        task.config = config
        task.priority = priority
        alloc = live_allocation(w, task)
        if alloc is not None:
            alloc.priority = priority
        topic = task_topic(task.id)
        w.later(lambda: ctx.topics.publish(topic))
        log.info("task priority", task_id=task.id, priority=priority)


def pause(ctx: MasterContext, w: Work, task: models.Task) -> None:
    """Determined's generic-task pause: the allocation is asked to stop (a preemption it may
    checkpoint on, a kill after the preemption timeout); the task is PAUSED once it has."""
    if task.no_pause:
        raise FailedPrecondition(f"task {task.id} was created with no_pause: it cannot be paused")
    if task.state in (T.PAUSED, T.STOPPING_PAUSED):
        return
    transition(ctx, w, task, T.STOPPING_PAUSED, "pause requested")
    alloc = live_allocation(w, task)
    if alloc is None:
        transition(ctx, w, task, T.PAUSED, "nothing ran")
        return
    stops.request_preempt(ctx, w, alloc, "task paused")


def unpause(ctx: MasterContext, w: Work, task: models.Task) -> None:
    if task.state == T.ACTIVE:
        return
    if task.state == T.STOPPING_PAUSED:
        raise FailedPrecondition(f"task {task.id} is still pausing; unpause it once it has paused")
    transition(ctx, w, task, T.ACTIVE, "unpaused")
    allocations.request_for_task(ctx, w, task)


def on_allocation_exit(ctx: MasterContext, w: Work, alloc: models.Allocation, outcome: Outcome) -> None:
    """An allocation of a task that is not a trial ended (an allocation-exit hook, wiring.py)."""
    task = w.session.get_one(models.Task, alloc.task_id)
    if alloc.exit_code is not None:
        task.exit_code = alloc.exit_code
    if alloc.exit_reason and outcome != Outcome.CLEAN:
        task.exit_reason = alloc.exit_reason
    why = f"its allocation ended: {outcome.value}"
    state = TaskState(task.state)
    if state == T.STOPPING_CANCELED:
        transition(ctx, w, task, T.CANCELED, why)
    elif state == T.STOPPING_PAUSED:
        if outcome == Outcome.ERROR:
            transition(ctx, w, task, T.ERROR, why)
        elif outcome == Outcome.CLEAN and not alloc.preempt_requested:
            transition(ctx, w, task, T.COMPLETED, why)
        else:
            transition(ctx, w, task, T.PAUSED, why)
    elif state != T.ACTIVE:
        return
    elif outcome == Outcome.CLEAN:
        transition(ctx, w, task, T.COMPLETED, why)
    elif task.kind in PREEMPTIBLE_KINDS and outcome in (Outcome.PREEMPTED, Outcome.TRANSIENT):
        # Preempted by the scheduler or lost with its agent: it runs again when placed.
        allocations.request_for_task(ctx, w, task)
    else:
        transition(ctx, w, task, T.ERROR, why)
