"""Trial lifecycle: start, stop, and what happens when an allocation of the trial ends.

Order of checks when an allocation ends (Determined's, reference §1.6): a stopping trial ends; a
paused one waits; a trial the searcher stopped, or whose code exited early on purpose, completes;
an infrastructure failure retries without counting; an error counts against max_restarts; a clean
exit completes the trial — except where the searcher gave the trial a target (halving searches):
a trial that reached it waits idle for the searcher's verdict, to be sent on or stopped.

Every state change goes through `transition`. This module commands allocations (it imports them);
it hears of their ends, and tells its experiment of its own end, through the context's hooks
(wiring.py), so it never imports the experiment lifecycle.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import bindparam, func, select

from cairn.searcher.v1 import searcher_pb2 as spb
from services.common.logging import get_logger
from services.master.domain.allocations import allocations, stops
from services.master.domain.config import config_view
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import NOT_CONNECTED, MasterContext, Work
from services.master.domain.kernel.errors import NotFound
from services.master.domain.kernel.states import (
    STOPPING_SEVERITY,
    STOPPING_TO_TERMINAL,
    TERMINAL,
    RunState,
    check_trial,
    is_stopping,
)
from services.master.domain.kernel.topics import trial_topic
from services.master.domain.trials import log_policies, searcher_outbox, trial_tasks
from services.master.store import models

log = get_logger(__name__)

S = RunState


class _LookUp:
    """The caller did not say which allocation is live: look it up."""


LOOK_UP = _LookUp()


def transition(
    ctx: MasterContext,
    w: Work,
    trial: models.Trial,
    target: RunState,
    reason: str,
    *,
    continuing: bool = False,
) -> None:
    """Every change of a trial's state: checked against the table (InvalidTransition otherwise),
    stamped, logged with its reason and published; a terminal state tells the hooks (the
    experiment may end). `continuing`: `det experiment continue` reopening an ended trial
    (states.CONTINUE_TRANSITIONS). A trial of an unmanaged experiment is moved by its own code
    and checked against its own table (states.UNMANAGED_TRIAL_TRANSITIONS), whoever moves it; one
    resumed after its end reopens its task."""
    previous = trial.state
    unmanaged = w.session.get_one(models.Experiment, trial.experiment_id).unmanaged
    check_trial(previous, target, continuing=continuing, unmanaged=unmanaged)
    reopening = continuing or (unmanaged and previous in TERMINAL and target not in TERMINAL)
    trial.state = target
    trial_tasks.follow(ctx, w, trial.experiment_id, trial, target, continuing=reopening)
    if reopening:
        trial.end_time = None
    if target in TERMINAL:
        trial.end_time = utcnow()
        if target == S.COMPLETED:
            trial.progress = 1.0
    topic = trial_topic(trial.id)
    w.later(lambda: ctx.topics.publish(topic))
    log.info("trial state", trial_id=trial.id, previous=previous, state=target.value, reason=reason)
    if target in TERMINAL:
        if not ctx.trial_end_hooks:
            raise RuntimeError(NOT_CONNECTED)
        for hook in ctx.trial_end_hooks:
            hook(w, trial)


def load(w: Work, trial_id: int) -> models.Trial:
    trial = w.session.get(models.Trial, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    return trial


def awaiting_verdict(trial: models.Trial) -> bool:
    """The trial trained to the searcher's target and waits to be sent on (a new target) or stopped."""
    return trial.searcher_target > 0 and trial.searcher_completed_length >= trial.searcher_target


def ensure_running(
    ctx: MasterContext,
    w: Work,
    trial: models.Trial,
    exp: models.Experiment,
    *,
    live: models.Allocation | _LookUp | None = LOOK_UP,
) -> None:
    """Request an allocation if the trial should be running and has none (`live`: its live
    allocation or None, when the caller read them all at once)."""
    if exp.state != S.ACTIVE or trial.state != S.ACTIVE or trial.searcher_stopped:
        return
    if isinstance(live, _LookUp):
        live = allocations.live_allocation(w, trial.id)
    if awaiting_verdict(trial) or live is not None:
        return
    allocations.request(ctx, w, trial, exp)


def request_allocations(
    ctx: MasterContext, w: Work, trials: list[models.Trial], exp: models.Experiment
) -> None:
    """Allocations for trials just created (none has one yet): ensure_running for many at once."""
    wanted = [
        trial
        for trial in trials
        if exp.state == S.ACTIVE
        and trial.state == S.ACTIVE
        and not trial.searcher_stopped
        and not awaiting_verdict(trial)
    ]
    if wanted:
        allocations.request_many(ctx, w, wanted, exp)


_PRELOADED_EXITS = "trials.preloaded_exits"


# A trial with its experiment and its task (which comes along for trial_tasks.follow, which then
# finds it in the session), by id: built once, as every allocation's end reads it.
_WITH_EXPERIMENT_AND_TASK = (
    select(models.Trial, models.Experiment, models.Task)
    .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
    .outerjoin(models.Task, models.Task.id == trial_tasks.task_id_column())
)
# A batch's ends read the trials with their tasks, and their experiments apart: a batch's trials
# share a few experiments, and each joined row decoded its experiment's whole config again.
_EXIT_READS = (
    select(models.Trial, models.Task)
    .outerjoin(models.Task, models.Task.id == trial_tasks.task_id_column())
    .where(models.Trial.id.in_(bindparam("ids", expanding=True)))
)
_EXPERIMENTS = select(models.Experiment).where(models.Experiment.id.in_(bindparam("ids", expanding=True)))
_EXIT_READ = _WITH_EXPERIMENT_AND_TASK.where(models.Trial.id == bindparam("id"))


def preload_exits(w: Work, trial_ids: Collection[int]) -> None:
    """Before a batch of allocation ends in one unit of work (agents' reports, batched): what
    on_allocation_exit reads of each trial, in one read for them all."""
    if not trial_ids:
        return
    with w.session.no_autoflush:
        trials = [trial for trial, _ in w.session.execute(_EXIT_READS, {"ids": list(trial_ids)})]
        experiment_ids = list({trial.experiment_id for trial in trials})
        experiments = {exp.id: exp for exp in w.session.scalars(_EXPERIMENTS, {"ids": experiment_ids})}
    w.memo[_PRELOADED_EXITS] = {trial.id: (trial, experiments[trial.experiment_id]) for trial in trials}


def on_allocation_exit(
    ctx: MasterContext, w: Work, alloc: models.Allocation, outcome: allocations.Outcome
) -> None:
    """An allocation of the trial ended (registered as an allocation-exit hook by wiring.py)."""
    preloaded = w.memo.get(_PRELOADED_EXITS)
    found = preloaded.get(alloc.trial_id) if isinstance(preloaded, dict) else None
    if found is not None:
        trial, exp = found
    else:
        # One read for the trial, its experiment and its task, without flushing the allocation's
        # end first: rows read by key that this unit did not create need none of its changes.
        with w.session.no_autoflush:
            trial, exp, _ = w.session.execute(_EXIT_READ, {"id": alloc.trial_id}).one()
    state = RunState(trial.state)
    Outcome = allocations.Outcome
    if is_stopping(state):
        target = STOPPING_TO_TERMINAL[state]
        if outcome == Outcome.ERROR and state == S.STOPPING_COMPLETED:
            target = S.ERROR
        finish(ctx, w, trial, exp, target, f"stopped; its allocation ended: {outcome.value}")
        return
    if state != S.ACTIVE:
        return  # PAUSED: resumes on activate; terminal: nothing left to do
    if trial.searcher_stopped or trial.early_exit_reason:
        why = (
            "stopped by the searcher"
            if trial.searcher_stopped
            else f"exited early: {trial.early_exit_reason}"
        )
        finish(ctx, w, trial, exp, S.COMPLETED, why)
        return
    if outcome == Outcome.ERROR:
        # A `cancel_retries` log policy matched: the failure is final (log_policies.py).
        if trial.log_policy_no_retry:
            log_policies.write_line(w.session, alloc, log_policies.NO_RETRY_TEXT)
            finish(ctx, w, trial, exp, S.ERROR, log_policies.NO_RETRY_TEXT)
            return
        # As in Determined: max_restarts 2 means three runs in all, and the trial ends with restarts=2.
        limit = config_view(exp.config).max_restarts
        if trial.restarts >= limit:
            finish(ctx, w, trial, exp, S.ERROR, f"failed {trial.restarts + 1} times (max_restarts {limit})")
            return
        trial.restarts += 1
        log.info("restarting trial", trial_id=trial.id, restarts=trial.restarts, max_restarts=limit)
        if trial.excluded_agents:  # an `exclude_node` log policy matched: placed elsewhere now
            log_policies.write_line(
                w.session, alloc, log_policies.excluded_note(trial, trial.excluded_agents)
            )
        ensure_running(ctx, w, trial, exp)
        return
    if outcome in (Outcome.TRANSIENT, Outcome.PREEMPTED, Outcome.KILLED):
        ensure_running(ctx, w, trial, exp)
        return
    if awaiting_verdict(trial):
        w.later(lambda: ctx.topics.publish(trial_topic(trial.id)))
        return
    if promoted_while_exiting(trial, alloc):
        ensure_running(ctx, w, trial, exp)
        return
    finish(ctx, w, trial, exp, S.COMPLETED, "its code exited 0")


def promoted_while_exiting(trial: models.Trial, alloc: models.Allocation) -> bool:
    """The code finished the target it was given, but the searcher raised the target after the code
    had asked for its next operation: resume it rather than end it."""
    started_with = alloc.searcher_target
    return 0 < started_with <= trial.searcher_completed_length < trial.searcher_target


def finish(
    ctx: MasterContext, w: Work, trial: models.Trial, exp: models.Experiment, target: RunState, reason: str
) -> None:
    """Move the trial to a terminal state and tell the searcher."""
    if trial.state in TERMINAL:
        return
    if target == S.CANCELED:
        event = spb.SearcherEvent(
            trial_exited_early=spb.TrialExitedEarly(
                request_id=trial.request_id, reason=spb.TrialExitedEarly.REASON_USER_CANCELED
            )
        )
        searcher_outbox.enqueue(ctx, w, exp.id, event)
    elif target == S.ERROR:
        event = spb.SearcherEvent(
            trial_exited_early=spb.TrialExitedEarly(
                request_id=trial.request_id, reason=spb.TrialExitedEarly.REASON_ERRORED
            )
        )
        searcher_outbox.enqueue(ctx, w, exp.id, event)
    searcher_outbox.enqueue(
        ctx, w, exp.id, spb.SearcherEvent(trial_exited=spb.TrialExited(request_id=trial.request_id))
    )
    transition(ctx, w, trial, target, reason)


def stop(
    ctx: MasterContext,
    w: Work,
    trial: models.Trial,
    exp: models.Experiment,
    target: RunState,
    *,
    live: models.Allocation | _LookUp | None = LOOK_UP,
) -> None:
    """Stop a trial: graceful for COMPLETED/CANCELED, immediate for KILLED/ERROR. `live`: its live
    allocation (or None), when the caller read them all at once."""
    current = RunState(trial.state)
    if current in TERMINAL:
        return
    if is_stopping(current) and STOPPING_SEVERITY.index(target) <= STOPPING_SEVERITY.index(current):
        return  # a stop can only become more severe
    transition(ctx, w, trial, target, "stop requested")
    alloc = allocations.live_allocation(w, trial.id) if isinstance(live, _LookUp) else live
    if alloc is None:
        finish(ctx, w, trial, exp, STOPPING_TO_TERMINAL[target], "stopped with nothing running")
        return
    if target in (S.STOPPING_KILLED, S.STOPPING_ERROR):
        stops.request_kill(ctx, w, alloc, grace_seconds=0, reason=f"trial {target.value.lower()}")
    else:
        reason = "searcher stopped the trial" if target == S.STOPPING_COMPLETED else "experiment canceled"
        stops.request_preempt(ctx, w, alloc, reason)


def pause(
    ctx: MasterContext, w: Work, trial: models.Trial, *, live: models.Allocation | _LookUp | None = LOOK_UP
) -> None:
    if trial.state != S.ACTIVE:
        return
    transition(ctx, w, trial, S.PAUSED, "experiment paused")
    alloc = allocations.live_allocation(w, trial.id) if isinstance(live, _LookUp) else live
    if alloc is not None:
        stops.request_preempt(ctx, w, alloc, "experiment paused")


def activate(
    ctx: MasterContext,
    w: Work,
    trial: models.Trial,
    exp: models.Experiment,
    *,
    live: models.Allocation | _LookUp | None = LOOK_UP,
) -> None:
    if trial.state != S.PAUSED:
        return
    transition(ctx, w, trial, S.ACTIVE, "experiment activated")
    ensure_running(ctx, w, trial, exp, live=live)


def live_trial_count(w: Work, experiment_id: int) -> int:
    return int(
        w.session.scalar(
            select(func.count())
            .select_from(models.Trial)
            .where(models.Trial.experiment_id == experiment_id, models.Trial.state.not_in(list(TERMINAL)))
        )
        or 0
    )
