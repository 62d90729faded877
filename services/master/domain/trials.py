"""Trial lifecycle: start, stop, and what happens when an allocation of the trial ends.

Order of checks when an allocation ends (Determined's, reference §1.6): a stopping trial ends; a
paused one waits; a trial the searcher stopped, or whose code exited early on purpose, completes;
an infrastructure failure retries without counting; an error counts against max_restarts; a clean
exit completes the trial — except where the searcher gave the trial a target (halving searches):
a trial that reached it waits idle for the searcher's verdict, to be sent on or stopped.
"""

from __future__ import annotations

from sqlalchemy import func, select

from cairn.searcher.v1 import searcher_pb2 as spb
from services.common.logging import get_logger
from services.master.domain import allocations
from services.master.domain import experiments as experiment_lifecycle
from services.master.domain.clock import utcnow
from services.master.domain.context import MasterContext, Work
from services.master.domain.states import (
    STOPPING_SEVERITY,
    STOPPING_TO_TERMINAL,
    TERMINAL,
    RunState,
    check_trial,
    is_stopping,
)
from services.master.domain.topics import trial_topic
from services.master.store import models

log = get_logger(__name__)

S = RunState

EARLY_EXIT_EVENT_REASONS = {
    "INVALID_HP": spb.TrialExitedEarly.REASON_INVALID_HP,
    "INIT_INVALID_HP": spb.TrialExitedEarly.REASON_INIT_INVALID_HP,
    "USER_REQUESTED_STOP": spb.TrialExitedEarly.REASON_USER_CANCELED,
}


def enqueue_searcher_event(ctx: MasterContext, w: Work, experiment_id: int, event: spb.SearcherEvent) -> None:
    w.session.add(
        models.SearcherEvent(
            experiment_id=experiment_id, payload=event.SerializeToString(), created_at=utcnow()
        )
    )
    w.later(ctx.pump_wakeup.set)


def awaiting_verdict(trial: models.Trial) -> bool:
    """The trial trained to the searcher's target and waits to be sent on (a new target) or stopped."""
    return trial.searcher_target > 0 and trial.searcher_completed_length >= trial.searcher_target


def ensure_running(ctx: MasterContext, w: Work, trial: models.Trial, exp: models.Experiment) -> None:
    """Request an allocation if the trial should be running and has none."""
    if exp.state != S.ACTIVE or trial.state != S.ACTIVE or trial.searcher_stopped:
        return
    if awaiting_verdict(trial) or allocations.live_allocation(w, trial.id) is not None:
        return
    allocations.request(ctx, w, trial, exp)


def _max_restarts(exp: models.Experiment) -> int:
    return int(exp.config.get("max_restarts", 5))


def on_allocation_exit(
    ctx: MasterContext, w: Work, alloc: models.Allocation, outcome: allocations.Outcome
) -> None:
    trial = w.session.get_one(models.Trial, alloc.trial_id)
    exp = w.session.get_one(models.Experiment, trial.experiment_id)
    state = RunState(trial.state)
    Outcome = allocations.Outcome
    if is_stopping(state):
        target = STOPPING_TO_TERMINAL[state]
        if outcome == Outcome.ERROR and state == S.STOPPING_COMPLETED:
            target = S.ERROR
        finish(ctx, w, trial, exp, target)
        return
    if state != S.ACTIVE:
        return  # PAUSED: resumes on activate; terminal: nothing left to do
    if trial.searcher_stopped or trial.early_exit_reason:
        finish(ctx, w, trial, exp, S.COMPLETED)
        return
    if outcome == Outcome.ERROR:
        # As in Determined: max_restarts 2 means three runs in all, and the trial ends with restarts=2.
        limit = _max_restarts(exp)
        if trial.restarts >= limit:
            log.info("trial failed too often", trial_id=trial.id, restarts=trial.restarts, max_restarts=limit)
            finish(ctx, w, trial, exp, S.ERROR)
            return
        trial.restarts += 1
        log.info("restarting trial", trial_id=trial.id, restarts=trial.restarts, max_restarts=limit)
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
    finish(ctx, w, trial, exp, S.COMPLETED)


def promoted_while_exiting(trial: models.Trial, alloc: models.Allocation) -> bool:
    """The code finished the target it was given, but the searcher raised the target after the code
    had asked for its next operation: resume it rather than end it."""
    started_with = alloc.searcher_target
    return 0 < started_with <= trial.searcher_completed_length < trial.searcher_target


def finish(
    ctx: MasterContext, w: Work, trial: models.Trial, exp: models.Experiment, target: RunState
) -> None:
    """Move the trial to a terminal state and tell the searcher."""
    if trial.state in TERMINAL:
        return
    check_trial(trial.state, target)
    trial.state = target
    trial.end_time = utcnow()
    if target == S.COMPLETED:
        trial.progress = 1.0
    if target == S.CANCELED:
        event = spb.SearcherEvent(
            trial_exited_early=spb.TrialExitedEarly(
                request_id=trial.request_id, reason=spb.TrialExitedEarly.REASON_USER_CANCELED
            )
        )
        enqueue_searcher_event(ctx, w, exp.id, event)
    elif target == S.ERROR:
        event = spb.SearcherEvent(
            trial_exited_early=spb.TrialExitedEarly(
                request_id=trial.request_id, reason=spb.TrialExitedEarly.REASON_ERRORED
            )
        )
        enqueue_searcher_event(ctx, w, exp.id, event)
    enqueue_searcher_event(
        ctx, w, exp.id, spb.SearcherEvent(trial_exited=spb.TrialExited(request_id=trial.request_id))
    )
    topic = trial_topic(trial.id)
    w.later(lambda: ctx.topics.publish(topic))
    log.info("trial ended", trial_id=trial.id, experiment_id=exp.id, state=target.value)
    experiment_lifecycle.maybe_finish(ctx, w, exp)


def stop(ctx: MasterContext, w: Work, trial: models.Trial, exp: models.Experiment, target: RunState) -> None:
    """Stop a trial: graceful for COMPLETED/CANCELED, immediate for KILLED/ERROR."""
    current = RunState(trial.state)
    if current in TERMINAL:
        return
    if is_stopping(current) and STOPPING_SEVERITY.index(target) <= STOPPING_SEVERITY.index(current):
        return  # a stop can only become more severe
    check_trial(current, target)
    trial.state = target
    topic = trial_topic(trial.id)
    w.later(lambda: ctx.topics.publish(topic))
    alloc = allocations.live_allocation(w, trial.id)
    if alloc is None:
        finish(ctx, w, trial, exp, STOPPING_TO_TERMINAL[target])
        return
    if target in (S.STOPPING_KILLED, S.STOPPING_ERROR):
        allocations.request_kill(ctx, w, alloc, grace_seconds=0, reason=f"trial {target.value.lower()}")
    else:
        reason = "searcher stopped the trial" if target == S.STOPPING_COMPLETED else "experiment canceled"
        allocations.request_preempt(ctx, w, alloc, reason)


def pause(ctx: MasterContext, w: Work, trial: models.Trial) -> None:
    if trial.state != S.ACTIVE:
        return
    trial.state = S.PAUSED
    alloc = allocations.live_allocation(w, trial.id)
    if alloc is not None:
        allocations.request_preempt(ctx, w, alloc, "experiment paused")


def activate(ctx: MasterContext, w: Work, trial: models.Trial, exp: models.Experiment) -> None:
    if trial.state != S.PAUSED:
        return
    trial.state = S.ACTIVE
    ensure_running(ctx, w, trial, exp)


def live_trial_count(w: Work, experiment_id: int) -> int:
    return int(
        w.session.scalar(
            select(func.count())
            .select_from(models.Trial)
            .where(models.Trial.experiment_id == experiment_id, models.Trial.state.not_in(list(TERMINAL)))
        )
        or 0
    )
