"""Experiment lifecycle: the user's actions (pause, activate, cancel, kill, archive, delete) and the
end of an experiment once its search is over and its trials have ended."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select

from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain import trials as trial_lifecycle
from services.master.domain.clock import utcnow
from services.master.domain.context import MasterContext, Work
from services.master.domain.errors import FailedPrecondition, NotFound, PermissionDenied
from services.master.domain.states import (
    STOPPING_TO_TERMINAL,
    TERMINAL,
    RunState,
    can_experiment,
    is_stopping,
)
from services.master.domain.topics import experiment_topic
from services.master.store import models

log = get_logger(__name__)

S = RunState


def load(w: Work, experiment_id: int) -> models.Experiment:
    exp = w.session.get(models.Experiment, experiment_id)
    if exp is None or exp.state in (S.DELETING, S.DELETED):
        raise NotFound(f"experiment {experiment_id} not found")
    return exp


def check_can_modify(principal: Principal, exp: models.Experiment) -> None:
    if principal.admin or principal.internal or principal.user_id == exp.owner_id:
        return
    raise PermissionDenied(
        f"experiment {exp.id} belongs to another user; only its owner or an admin may change it"
    )


def _trials(w: Work, exp: models.Experiment) -> list[models.Trial]:
    return list(w.session.scalars(select(models.Trial).where(models.Trial.experiment_id == exp.id)))


def _publish(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    topic = experiment_topic(exp.id)
    w.later(lambda: ctx.topics.publish(topic))


def _move(exp: models.Experiment, target: RunState, verb: str) -> None:
    if not can_experiment(exp.state, target):
        raise FailedPrecondition(f"experiment {exp.id} is {exp.state}; it cannot be {verb}")
    exp.state = target


def pause(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    if exp.state == S.PAUSED:
        return
    _move(exp, S.PAUSED, "paused")
    for trial in _trials(w, exp):
        trial_lifecycle.pause(ctx, w, trial)
    _publish(ctx, w, exp)
    log.info("experiment paused", experiment_id=exp.id)


def activate(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    if exp.state == S.ACTIVE:
        return
    _move(exp, S.ACTIVE, "activated")
    for trial in _trials(w, exp):
        trial_lifecycle.activate(ctx, w, trial, exp)
    _publish(ctx, w, exp)
    log.info("experiment activated", experiment_id=exp.id)


def _stop(ctx: MasterContext, w: Work, exp: models.Experiment, target: RunState, verb: str) -> None:
    if exp.state in TERMINAL:
        raise FailedPrecondition(f"experiment {exp.id} is {exp.state}; it cannot be {verb}")
    if exp.state == target or (target == S.STOPPING_CANCELED and exp.state == S.STOPPING_KILLED):
        return
    _move(exp, target, verb)
    for trial in _trials(w, exp):
        trial_lifecycle.stop(ctx, w, trial, exp, target)
    _publish(ctx, w, exp)
    log.info("experiment stopping", experiment_id=exp.id, state=target.value)
    maybe_finish(ctx, w, exp)


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
    exp.state = target
    _publish(ctx, w, exp)
    log.info("search finished", experiment_id=exp.id, state=target.value)
    maybe_finish(ctx, w, exp)


def maybe_finish(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    """End a stopping experiment once none of its trials is left running."""
    if not is_stopping(exp.state) or trial_lifecycle.live_trial_count(w, exp.id) > 0:
        return
    target = STOPPING_TO_TERMINAL[RunState(exp.state)]
    exp.state = target
    exp.end_time = utcnow()
    if target == S.COMPLETED:
        exp.progress = 1.0
    # The search is over: its pending events and snapshot have no further use.
    w.session.execute(delete(models.SearcherEvent).where(models.SearcherEvent.experiment_id == exp.id))
    w.session.execute(delete(models.SearcherSnapshot).where(models.SearcherSnapshot.experiment_id == exp.id))
    session_id, config = exp.searcher_session_id, exp.config
    w.later(lambda: close_search_session(ctx, session_id, config))
    for hook in ctx.experiment_end_hooks:
        hook(w, exp)
    _publish(ctx, w, exp)
    log.info("experiment ended", experiment_id=exp.id, state=target.value)


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
    exp.state = S.DELETING
    _publish(ctx, w, exp)
