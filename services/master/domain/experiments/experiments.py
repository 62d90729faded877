"""Experiment lifecycle: the user's actions (pause, activate, cancel, kill, archive, delete) and the
end of an experiment once its search is over and its trials have ended.

Every state change goes through `transition`. The experiment commands its trials (it imports the
trial lifecycle); a trial's end reaches it through the trial-end hook (wiring.py)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.allocations import allocations
from services.master.domain.experiments import search_snapshots
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel import deferred_work
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import FailedPrecondition, NotFound
from services.master.domain.kernel.states import (
    PLACED_ALLOCATION,
    STOPPING_SEVERITY,
    STOPPING_TO_TERMINAL,
    TERMINAL,
    RunState,
    can_experiment,
    check_experiment,
    is_stopping,
)
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.domain.kernel.topics import experiment_topic
from services.master.domain.reads.models import describe_registered, registered_in_experiment
from services.master.domain.trials import searcher_outbox
from services.master.domain.trials import trials as trial_lifecycle
from services.master.domain.webhooks import triggers as webhook_triggers
from services.master.store import models

log = get_logger(__name__)

S = RunState

# A cancel or kill stops this many trials (besides those holding slots) before it returns; the
# rest are stopped STOP_BATCH to a unit of work by the deferred-work loop.
INLINE_STOPS = 200
STOP_BATCH = 1000
# Ids per IN list when reading many trials' rows.
_READ_CHUNK = 900


def load(w: Work, experiment_id: int) -> models.Experiment:
    exp = w.session.get(models.Experiment, experiment_id)
    if exp is None or exp.state in (S.DELETING, S.DELETED):
        raise NotFound(f"experiment {experiment_id} not found")
    return exp


def check_can_modify(
    s: Session,
    principal: Principal,
    exp: models.Experiment,
    permission: Permission = Permission.UPDATE_EXPERIMENT,
) -> None:
    """Not found unless the caller may read the experiment; refused unless they may do
    `permission` to it (identity/access.py)."""
    access.check_experiment(s, principal, exp, permission)


def _trials(w: Work, exp: models.Experiment) -> list[models.Trial]:
    return list(w.session.scalars(select(models.Trial).where(models.Trial.experiment_id == exp.id)))


def _publish(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    topic = experiment_topic(exp.id)
    w.later(lambda: ctx.topics.publish(topic))


def transition(
    ctx: MasterContext,
    w: Work,
    exp: models.Experiment,
    target: RunState,
    reason: str,
    *,
    continuing: bool = False,
) -> None:
    """Every change of an experiment's state: checked against the table (InvalidTransition
    otherwise), stamped, logged with its reason and published. `continuing`: the move is
    `det experiment continue` reopening an ended experiment (states.CONTINUE_TRANSITIONS)."""
    previous = exp.state
    check_experiment(previous, target, continuing=continuing, unmanaged=exp.unmanaged)
    exp.state = target
    if continuing or (exp.unmanaged and target not in TERMINAL):
        exp.end_time = None
    if target in TERMINAL:
        exp.end_time = utcnow()
        if target == S.COMPLETED:
            exp.progress = 1.0
    _owe_side_effects(w, exp, target)
    # Webhooks hearing this state: their posts are owed with the state itself (webhooks/outbox.py).
    webhook_triggers.experiment_state_changed(ctx, w, exp)
    _publish(ctx, w, exp)
    log.info("experiment state", experiment_id=exp.id, previous=previous, state=target.value, reason=reason)


def _owe_side_effects(w: Work, exp: models.Experiment, target: RunState) -> None:
    """What a state owes, written with the state itself: the deferred-work loop does it later,
    through crashes and outages (deferred_work.py)."""
    if target in TERMINAL and not exp.unmanaged:
        # By its checkpoint policy. An unmanaged experiment's checkpoints are its code's: they are
        # written where that code runs, and a re-run under its external id resumes from them.
        deferred_work.owe(w, deferred_work.CHECKPOINT_GC, exp.id)
    elif target == S.DELETING:
        deferred_work.owe(w, deferred_work.DELETE_EXPERIMENT, exp.id)  # files first, then rows


def _move(ctx: MasterContext, w: Work, exp: models.Experiment, target: RunState, verb: str) -> None:
    """A user's request: a move the table forbids is refused with a message, not an error."""
    if not can_experiment(exp.state, target):
        raise FailedPrecondition(f"experiment {exp.id} is {exp.state}; it cannot be {verb}")
    transition(ctx, w, exp, target, f"{verb} by a user")


def check_managed(exp: models.Experiment, verb: str) -> None:
    """An unmanaged experiment's state is its code's to set: the master neither pauses nor starts it."""
    if exp.unmanaged:
        raise FailedPrecondition(
            f"experiment {exp.id} is unmanaged: its code runs outside the cluster and sets its state; "
            f"it cannot be {verb}"
        )


def pause(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    check_managed(exp, "paused")
    if exp.state == S.PAUSED:
        return
    _move(ctx, w, exp, S.PAUSED, "paused")
    trials = [t for t in _trials(w, exp) if t.state == S.ACTIVE]
    live, _tasks = _read_for(w, exp, trials)
    allocations.preload_containers(w, [a.id for a in live.values() if a.state in PLACED_ALLOCATION])
    for trial in trials:
        trial_lifecycle.pause(ctx, w, trial, live=live.get(trial.id))


def activate(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    check_managed(exp, "activated")
    if exp.state == S.ACTIVE:
        return
    _move(ctx, w, exp, S.ACTIVE, "activated")
    trials = [t for t in _trials(w, exp) if t.state == S.PAUSED]
    live, _tasks = _read_for(w, exp, trials)
    allocations.preload_containers(w, [a.id for a in live.values() if a.state in PLACED_ALLOCATION])
    for trial in trials:
        trial_lifecycle.activate(ctx, w, trial, exp, live=live.get(trial.id))


def _stop(ctx: MasterContext, w: Work, exp: models.Experiment, target: RunState, verb: str) -> None:
    if exp.state in TERMINAL:
        raise FailedPrecondition(f"experiment {exp.id} is {exp.state}; it cannot be {verb}")
    if exp.state == target or (target == S.STOPPING_CANCELED and exp.state == S.STOPPING_KILLED):
        return
    if exp.unmanaged:
        _cancel_unmanaged(ctx, w, exp, verb)
        return
    _move(ctx, w, exp, target, verb)
    # Trials that hold slots are told now; of the rest, the first INLINE_STOPS are stopped now and
    # the others by the deferred-work loop in batches, so the call returns at once whatever the
    # experiment's size (the scheduler places nothing more of a canceled or killed experiment).
    holding = _stoppable(w, exp.id, target, limit=None, placed_only=True)
    first = _stoppable(w, exp.id, target, limit=INLINE_STOPS + 1)
    more = len(first) > INLINE_STOPS
    chosen = {t.id: t for t in [*holding, *first[:INLINE_STOPS]]}
    _stop_trials(ctx, w, exp, target, list(chosen.values()))
    if more:
        deferred_work.owe(w, deferred_work.STOP_TRIALS, exp.id)
    maybe_finish(ctx, w, exp)


def _cancel_unmanaged(ctx: MasterContext, w: Work, exp: models.Experiment, verb: str) -> None:
    """Nothing of an unmanaged experiment runs on the cluster to be stopped: its open trials and
    the experiment end CANCELED at once (its code, if still running, may still report; a re-run
    under its external ids resumes it)."""
    for trial in _trials(w, exp):
        if trial.state not in TERMINAL:
            trial_lifecycle.transition(ctx, w, trial, S.CANCELED, f"{verb} by a user")
    transition(ctx, w, exp, S.CANCELED, f"{verb} by a user")


def _stoppable_states(target: RunState) -> list[RunState]:
    """The trial states a stop to `target` still changes (a stop only becomes more severe)."""
    milder = STOPPING_SEVERITY[: STOPPING_SEVERITY.index(target)]
    return [S.ACTIVE, S.PAUSED, *milder]


def _stoppable(
    w: Work, experiment_id: int, target: RunState, *, limit: int | None, placed_only: bool = False
) -> list[models.Trial]:
    query = select(models.Trial).where(
        models.Trial.experiment_id == experiment_id, models.Trial.state.in_(_stoppable_states(target))
    )
    if placed_only:
        query = query.where(
            models.Trial.id.in_(
                select(models.Allocation.trial_id).where(models.Allocation.state.in_(list(PLACED_ALLOCATION)))
            )
        )
    query = query.order_by(models.Trial.id)
    if limit is not None:
        query = query.limit(limit)
    return list(w.session.scalars(query))


def _stop_trials(
    ctx: MasterContext, w: Work, exp: models.Experiment, target: RunState, trials: list[models.Trial]
) -> None:
    """Stop `trials`, reading their live allocations and tasks in two queries first (the tasks are
    held here so the session keeps them, where the trial lifecycle finds them without a query)."""
    if not trials:
        return
    live, _tasks = _read_for(w, exp, trials)
    allocations.preload_containers(w, [a.id for a in live.values() if a.state in PLACED_ALLOCATION])
    for trial in trials:
        trial_lifecycle.stop(ctx, w, trial, exp, target, live=live.get(trial.id))


def _read_for(
    w: Work, exp: models.Experiment, trials: list[models.Trial]
) -> tuple[dict[int, models.Allocation], list[models.Task]]:
    """The trials' live allocations and their tasks, a query each (in chunks, for the database's
    bound on parameters). The caller holds the tasks while it works: held, they stay in the
    session, where the trial lifecycle finds them without a query per trial."""
    live: dict[int, models.Allocation] = {}
    tasks: list[models.Task] = []
    for start in range(0, len(trials), _READ_CHUNK):
        chunk = trials[start : start + _READ_CHUNK]
        live.update(allocations.live_of_trials(w, [t.id for t in chunk]))
        task_ids = [trial_task_id(exp.id, t.request_id) for t in chunk]
        tasks.extend(w.session.scalars(select(models.Task).where(models.Task.id.in_(task_ids))))
    return live, tasks


def stop_remaining(ctx: MasterContext, experiment_id: int) -> bool:
    """The deferred part of a cancel or kill (deferred_work.STOP_TRIALS): the experiment's
    remaining trials, STOP_BATCH to a unit of work, until none is left; True when done."""
    while not ctx.stopping.is_set():
        with ctx.unit_of_work() as w:
            exp = w.session.get(models.Experiment, experiment_id)
            if exp is None or exp.state not in (S.STOPPING_CANCELED, S.STOPPING_KILLED):
                return True  # ended, or moved on (deleted): nothing is left to stop
            target = RunState(exp.state)
            batch = _stoppable(w, exp.id, target, limit=STOP_BATCH)
            _stop_trials(ctx, w, exp, target, batch)
            maybe_finish(ctx, w, exp)
            if len(batch) < STOP_BATCH:
                return True
    return False


def cancel(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    _stop(ctx, w, exp, S.STOPPING_CANCELED, "canceled")


def kill(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    _stop(ctx, w, exp, S.STOPPING_KILLED, "killed")


def shutdown_search(
    ctx: MasterContext, w: Work, exp: models.Experiment, *, cancel: bool, failure: bool
) -> None:
    """The searcher has nothing more to run: the experiment ends when its trials have."""
    if exp.state not in (S.ACTIVE, S.PAUSED):
        maybe_finish(ctx, w, exp)
        return
    target = S.STOPPING_ERROR if failure else S.STOPPING_CANCELED if cancel else S.STOPPING_COMPLETED
    transition(ctx, w, exp, target, "the search is over")
    maybe_finish(ctx, w, exp)


def maybe_finish(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    """End a stopping experiment once none of its trials is left running."""
    if not is_stopping(exp.state) or trial_lifecycle.live_trial_count(w, exp.id) > 0:
        return
    target = STOPPING_TO_TERMINAL[RunState(exp.state)]
    transition(ctx, w, exp, target, "no trial is left running")
    # The search is over: its pending events and snapshot have no further use.
    searcher_outbox.forget(w, exp.id)
    w.session.execute(delete(models.SearcherAnswer).where(models.SearcherAnswer.experiment_id == exp.id))
    search_snapshots.forget_snapshot(w, exp.id)
    session_id, config = exp.searcher_session_id, exp.config
    w.later(lambda: close_search_session(ctx, session_id, config))


def on_trial_end(ctx: MasterContext, w: Work, trial: models.Trial) -> None:
    """One of the experiment's trials ended (registered as a trial-end hook by wiring.py): whether
    the experiment ends with it is asked once per unit of work, before it commits, however many of
    its trials ended in it."""
    experiment_id = trial.experiment_id
    w.once_before_commit(
        ("experiment may end", experiment_id),
        lambda: maybe_finish(ctx, w, w.session.get_one(models.Experiment, experiment_id)),
    )


def close_search_session(ctx: MasterContext, session_id: str, config: dict[str, Any]) -> None:
    try:
        ctx.searchers.for_config(config).close(session_id)
    except Exception as exc:  # the searcher drops idle sessions on restart anyway
        log.warning("could not close search session", session_id=session_id, error=str(exc))


def set_archived(w: Work, exp: models.Experiment, archived: bool) -> None:
    if exp.archived == archived:
        return
    if archived and exp.state not in TERMINAL:
        raise FailedPrecondition(
            f"experiment {exp.id} is {exp.state}: only a finished experiment can be archived"
        )
    exp.archived = archived


def mark_deleting(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    if exp.state not in TERMINAL:
        raise FailedPrecondition(f"experiment {exp.id} is {exp.state}: cancel or kill it before deleting it")
    # Registered checkpoints outlive their experiment's GC, not its deletion: refused, before any
    # file goes (registrations check for DELETING under the same lock).
    registered = registered_in_experiment(w.session, exp.id)
    if registered:
        raise FailedPrecondition(
            f"experiment {exp.id} cannot be deleted: {describe_registered(registered)}; "
            "delete those model versions first"
        )
    transition(ctx, w, exp, S.DELETING, "deleted by a user")
