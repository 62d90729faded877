"""What trial code learns from the master while it runs: whether to stop (preemption) and how long
to train (searcher operations)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass

from sqlalchemy import bindparam, exists, func, or_, select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.allocations import allocations
from services.master.domain.config import config_view
from services.master.domain.identity import access, allocation_access, scopes
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import (
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from services.master.domain.kernel.states import TERMINAL
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.kernel.topics import allocation_topic, searcher_answers_topic, trial_topic
from services.master.domain.metrics.validations import forward_operation_result
from services.master.store import models

# Held while a call waits for signals: a server thread is taken for that long (the servicer's
# bounded slots; ResourceExhausted when none is free). A call that answers at once takes none.
WaitHold = Callable[[], AbstractContextManager[None]]


@dataclass(frozen=True)
class SignalState:
    preempt: bool
    reason: str
    searcher_target: int
    ended: bool


def _check_owner(
    ctx: MasterContext, principal: Principal, allocation_id: str, *, changing: bool = False
) -> None:
    """Trial code names its own allocation only; a user one of a task they may read (or, to
    answer its signals, change: identity/access.py)."""
    with ctx.db.read() as s:
        allocation_access.check_allocation(s, principal, allocation_id)
        if allocation_access.is_trial_code(principal) or principal.internal:
            return
        alloc = s.get(models.Allocation, allocation_id)
        task = s.get(models.Task, alloc.task_id) if alloc is not None else None
        if task is None:
            raise NotFound(f"allocation {allocation_id} not found")
        if changing:
            update = Permission.UPDATE_EXPERIMENT if task.experiment_id is not None else Permission.UPDATE_NSC
            access.check_task(s, principal, task, update)
        else:
            view = (
                Permission.VIEW_EXPERIMENT_METADATA if task.experiment_id is not None else Permission.VIEW_NSC
            )
            access.check_readable(principal, view, scopes.of_task(s, task), f"allocation {allocation_id}", s)


# An allocation's signals and its trial's target, in one read built once: every watch reads it
# after each wake-up of its topic (every report of its trial publishes it), and loading the two
# rows whole decoded their JSON (placements, hyperparameters, summaries) for four fields.
_SIGNALS = (
    select(
        models.Allocation.preempt_requested,
        models.Allocation.kill_requested,
        models.Allocation.preempt_reason,
        models.Allocation.state,
        models.Allocation.trial_id,
        models.Trial.searcher_target,
    )
    .outerjoin(models.Trial, models.Trial.id == models.Allocation.trial_id)
    .where(models.Allocation.id == bindparam("allocation_id"))
)


def signal_state(ctx: MasterContext, allocation_id: str) -> tuple[SignalState, str]:
    """The allocation's signals, and the topic its changes are published on (its trial's, whose
    searcher target is a signal too; an allocation's own for any other task)."""
    with ctx.db.read() as s:
        row = s.execute(_SIGNALS, {"allocation_id": allocation_id}).one_or_none()
    if row is None:
        raise NotFound(f"allocation {allocation_id} not found")
    return (
        SignalState(
            # A kill is a preemption the code may still see in its last moments.
            preempt=bool(row.preempt_requested or row.kill_requested),
            reason=row.preempt_reason,
            searcher_target=int(row.searcher_target or 0) if row.trial_id is not None else 0,
            ended=row.state == A.TERMINATED,
        ),
        trial_topic(row.trial_id) if row.trial_id is not None else allocation_topic(allocation_id),
    )


def wait_preemption(
    ctx: MasterContext,
    principal: Principal,
    allocation_id: str,
    timeout_s: float,
    hold: WaitHold = contextlib.nullcontext,
) -> bool:
    """Determined's long poll: answer at once if preempted, else when it happens or at the timeout.
    The wait is made under `hold` (which may refuse it)."""
    _check_owner(ctx, principal, allocation_id)
    state, topic = signal_state(ctx, allocation_id)
    deadline = time.monotonic() + max(0.0, min(timeout_s, 3600.0))
    if state.preempt or state.ended or deadline <= time.monotonic():
        return state.preempt
    preempt = False
    with hold():
        for change in _changes(ctx, allocation_id, state, topic, deadline=deadline):
            preempt = change.preempt
            if preempt:
                break
    return preempt


def ack_preemption(ctx: MasterContext, principal: Principal, allocation_id: str) -> None:
    _check_owner(ctx, principal, allocation_id, changing=True)
    with ctx.unit_of_work() as w:
        alloc = w.session.get(models.Allocation, allocation_id)
        if alloc is None:
            raise NotFound(f"allocation {allocation_id} not found")
        alloc.preempt_acked = True


def notify_exiting(ctx: MasterContext, principal: Principal, allocation_id: str) -> bool:
    """The allocation's task is exiting: its slots may go to the next allocation now
    (allocations.release_early). Whether they were released. Only the allocation's own task may say
    so (its allocation token): a user's word would hand slots on under a process still running."""
    if not allocation_access.is_trial_code(principal):
        raise PermissionDenied("only the allocation's own task (its allocation token) can say it is exiting")
    _check_owner(ctx, principal, allocation_id)
    with ctx.unit_of_work() as w:
        alloc = w.session.get(models.Allocation, allocation_id)
        if alloc is None:
            raise NotFound(f"allocation {allocation_id} not found")
        return allocations.release_early(ctx, w, alloc)


def watch(
    ctx: MasterContext,
    principal: Principal,
    allocation_id: str,
    is_active: Callable[[], bool],
    hold: WaitHold = contextlib.nullcontext,
) -> Iterator[SignalState]:
    """The current state, then every change, until the allocation ends or the caller leaves. What
    follows the first state is waited for under `hold` (which may refuse it, once the caller has
    the state as it is)."""
    _check_owner(ctx, principal, allocation_id)
    state, topic = signal_state(ctx, allocation_id)
    yield state
    if state.ended:
        return
    with hold():
        yield from _changes(ctx, allocation_id, state, topic, is_active)


# A call waiting for signals wakes this often to see whether its caller is still there (no read),
WATCH_WAKE_S = 5.0
# and reads the state again at least this often when nothing was published. Every writer of what
# signal_state reads publishes its topic (allocations.transition, request_preempt, request_kill, a
# searcher's new target), so this is only a net for a writer that forgets; it used to be every
# wake-up, two reads per 5 s for every running trial's watch, whatever happened.
WATCH_REREAD_S = 60.0


def _changes(
    ctx: MasterContext,
    allocation_id: str,
    state: SignalState,
    topic: str,
    is_active: Callable[[], bool] = lambda: True,
    deadline: float = math.inf,
) -> Iterator[SignalState]:
    """Each change of the allocation's signals after `state`, until it ends, the caller leaves or
    the deadline (time.monotonic()) passes. The state is read again only when its topic was
    published (or after WATCH_REREAD_S)."""
    # The version is taken before each read: a publish after the read moves past it, so the wait
    # that follows returns at once and no change is missed.
    seen = ctx.topics.version(topic)
    latest, _ = signal_state(ctx, allocation_id)
    read_at = time.monotonic()
    while True:
        if latest != state:
            state = latest
            yield state
        remaining = deadline - time.monotonic()
        if state.ended or not is_active() or ctx.topics.closed or remaining <= 0:
            return
        version = ctx.topics.wait(topic, seen, timeout=min(remaining, WATCH_WAKE_S))
        if version == seen and time.monotonic() - read_at < WATCH_REREAD_S:
            continue
        seen = version
        latest, _ = signal_state(ctx, allocation_id)
        read_at = time.monotonic()


# How long GetCurrentTrialSearcherOperation waits for the searcher's verdict on a result the trial
# just reported at its target. The searcher answers in milliseconds; past this (a searcher that is
# down), the trial is told it is done, exits and waits idle to be resumed or stopped, and its slot is
# free meanwhile.
VERDICT_WAIT_S = 10.0
# Re-read at least this often while waiting, whatever wake-ups were missed.
VERDICT_POLL_S = 0.5


@dataclass(frozen=True)
class Operation:
    request_id: str
    length: int
    completed: bool
    # The trial is at its target and the searcher has not yet answered its result there.
    verdict_pending: bool = False


# What a trial's operation reads, built once: each GetCurrentTrialSearcherOperation reads them,
# and a wait for a verdict again every time the experiment's answers move.
_NEWEST_EVENT = select(func.max(models.SearcherEvent.id)).where(
    models.SearcherEvent.experiment_id == bindparam("experiment_id")
)
_UNANSWERED = select(
    or_(
        exists().where(
            models.SearcherEvent.experiment_id == bindparam("experiment_id"),
            models.SearcherEvent.id <= bindparam("horizon"),
        ),
        exists().where(models.SearcherAnswer.experiment_id == bindparam("experiment_id")),
    )
)
_OPERATION = (
    select(
        models.Trial.request_id,
        models.Trial.experiment_id,
        models.Trial.searcher_target,
        models.Trial.searcher_stopped,
        models.Trial.searcher_completed_length,
        models.Experiment.state.label("experiment_state"),
    )
    .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
    .where(models.Trial.id == bindparam("trial_id"))
)
_CONFIG = select(models.Experiment.config).where(models.Experiment.id == bindparam("experiment_id"))


def _read_operation(
    s: Session, trial_id: int, experiment_id: int, horizon: int | None
) -> tuple[Operation, int | None]:
    """The trial's operation, and the newest searcher event id its verdict depends on. `s` must be
    one snapshot (Database.snapshot_read): the searcher pump removes answered events and applies
    their answer (a new target, a stop) in one transaction, and a trial's completion stores its
    result's event with its completed length. Read in separate snapshots, a commit between the
    statements once showed the trial's old target with its events answered, and the trial was told
    "done" at a rung the searcher had just sent it past (it exited and was started again)."""
    # Events queue in order, so once every event up to the newest one queued when the trial asked
    # has been answered, and no answer's rest waits to be applied (searcher_actions.
    # apply_response_in_part), the answer to its result is in (a new target, a stop, or neither).
    if horizon is None:
        # 0 when none is queued: a wait then covers no event queued after it began.
        horizon = s.scalar(_NEWEST_EVENT, {"experiment_id": experiment_id}) or 0
    pending = bool(s.scalar(_UNANSWERED, {"experiment_id": experiment_id, "horizon": horizon}))
    trial = s.execute(_OPERATION, {"trial_id": trial_id}).one_or_none()
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    length = int(trial.searcher_target)
    if not length:
        config = s.scalar(_CONFIG, {"experiment_id": trial.experiment_id})
        length = config_view(config or {}).training_length
    if length <= 0:
        return Operation(trial.request_id, 0, True), horizon
    completed = trial.searcher_stopped or trial.searcher_completed_length >= length
    at_target = completed and not trial.searcher_stopped and trial.searcher_target > 0
    if not at_target or trial.experiment_state in TERMINAL:
        return Operation(trial.request_id, length, completed), horizon
    return Operation(trial.request_id, length, completed, verdict_pending=pending), horizon


def current_operation(
    ctx: MasterContext,
    principal: Principal,
    trial_id: int,
    wait_s: float = VERDICT_WAIT_S,
    hold: WaitHold = contextlib.nullcontext,
) -> Operation:
    """The trial's current searcher operation. A trial that completed its target asks right after
    reporting its result; rather than tell it "done" while the searcher is still deciding (it would
    exit, and be started again from its checkpoint if sent on), wait for the verdict, under `hold`.
    Where `hold` refuses (no room to wait), the operation is told as it is, as when the wait ends."""
    with ctx.db.read() as s:
        access.check_trial(s, principal, trial_id, Permission.VIEW_EXPERIMENT_METADATA)
        trial = s.get(models.Trial, trial_id)
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        experiment_id = trial.experiment_id
    topic = searcher_answers_topic(experiment_id)
    deadline = time.monotonic() + wait_s
    seen = ctx.topics.version(topic)
    with ctx.db.snapshot_read() as s:
        operation, horizon = _read_operation(s, trial_id, experiment_id, None)
    if not operation.verdict_pending or wait_s <= 0 or ctx.topics.closed:
        return operation
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(hold())
        except ResourceExhausted:
            return operation
        while True:
            ctx.topics.wait(topic, seen, timeout=min(deadline - time.monotonic(), VERDICT_POLL_S))
            seen = ctx.topics.version(topic)
            with ctx.db.snapshot_read() as s:
                operation, horizon = _read_operation(s, trial_id, experiment_id, horizon)
            if not operation.verdict_pending or deadline <= time.monotonic() or ctx.topics.closed:
                return operation


def complete_operation(
    ctx: MasterContext, principal: Principal, trial_id: int, length: int, searcher_metric: float
) -> None:
    if length <= 0:
        raise InvalidArgument("completed_operation.validate_after.length: must be > 0")
    with ctx.unit_of_work() as w:
        access.check_trial(w.session, principal, trial_id, Permission.UPDATE_EXPERIMENT)
        trial = w.session.get(models.Trial, trial_id)
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        if length > trial.searcher_completed_length:
            forward_operation_result(ctx, w, trial, length, searcher_metric)
        trial.searcher_completed_length = max(trial.searcher_completed_length, length)
        topic = trial_topic(trial_id)
        w.later(lambda: ctx.topics.publish(topic))
