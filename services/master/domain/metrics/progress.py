"""What a trial says of itself beside its metrics: its progress (told to the searcher at marks, not
at every report), its runner's status (Determined's runner metadata), and an early exit. Each is
checked against the caller: trial code reports only for its own trial."""

from __future__ import annotations

import math
from datetime import datetime

from sqlalchemy import select

from cairn.searcher.v1 import searcher_pb2 as spb
from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from services.master.domain.kernel.states import TERMINAL
from services.master.domain.trials import searcher_outbox
from services.master.store import models


def progress_is_news(experiment_state: str, previous: float, progress: float) -> bool:
    """Whether the searcher hears of the trial's progress going from `previous` to `progress`."""
    return experiment_state not in TERMINAL and (
        progress_mark(progress) != progress_mark(previous) or progress == 1.0
    )


def progress_tells_searcher(ctx: MasterContext, trial_id: int, progress: float) -> bool:
    with ctx.db.read() as s:
        found = s.execute(
            select(models.Trial.progress, models.Experiment.state)
            .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
            .where(models.Trial.id == trial_id)
        ).first()
    if found is None:
        return False  # the unit of work says it is not there
    previous, state = found
    return progress_is_news(state, previous, progress)


def reporting_trial(w: Work, principal: Principal, trial_id: int) -> models.Trial:
    """The trial a report is for, once the caller may report for it."""
    access.check_trial(w.session, principal, trial_id, Permission.UPDATE_EXPERIMENT)
    trial = w.session.get(models.Trial, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found")
    return trial


def check_run_reporter(ctx: MasterContext, principal: Principal, run_id: int) -> None:
    """Determined's harness announces a run (its trial) before reporting: it must be the caller's."""
    with ctx.db.read() as s:
        access.check_trial(s, principal, run_id, Permission.UPDATE_EXPERIMENT, field="run_id")
        if s.get(models.Trial, run_id) is None:
            raise NotFound(f"run {run_id} not found")


# Trial progress reaches the searcher in steps of this size (20 events per trial at most).
PROGRESS_STEP = 0.05


def progress_mark(progress: float) -> int:
    return math.floor(progress / PROGRESS_STEP + 1e-9)


def check_progress(progress: float) -> None:
    if not 0.0 <= progress <= 1.0 or math.isnan(progress):
        raise InvalidArgument("progress: must be between 0 and 1")


def report_progress(ctx: MasterContext, principal: Principal, trial_id: int, progress: float) -> None:
    check_progress(progress)
    with ctx.unit_of_work() as w:
        trial = reporting_trial(w, principal, trial_id)
        exp = w.session.get_one(models.Experiment, trial.experiment_id)
        set_progress(ctx, w, trial, exp, progress)


def set_progress(
    ctx: MasterContext,
    w: Work,
    trial: models.Trial,
    exp: models.Experiment,
    progress: float,
    *,
    tells_searcher: bool = True,
) -> None:
    """The trial's progress (checked) is `progress`, in the caller's unit of work. The searcher may
    be told (an outbox event) only under the process-wide lock (`tells_searcher`)."""
    previous = trial.progress
    trial.progress = progress
    note_pace(trial, progress, utcnow())
    # The searcher only needs progress that moved visibly (it shows in the experiment's
    # progress): each report would cost a searcher round trip and a snapshot. So it hears when
    # the trial passes a PROGRESS_STEP mark, and at the end.
    if tells_searcher and progress_is_news(exp.state, previous, progress):
        event = spb.SearcherEvent(
            trial_progress=spb.TrialProgress(request_id=trial.request_id, progress=progress)
        )
        searcher_outbox.enqueue(ctx, w, exp.id, event)


def note_pace(trial: models.Trial, progress: float, now: datetime) -> None:
    """Keep what the start forecast measures a run's pace by: the first report of the trial's
    current run and the time of its latest. A run that reports less than its first report (it
    went back to a checkpoint) starts its pace again there."""
    first = trial.pace_progress
    if trial.pace_run_id != trial.run_id or trial.pace_at is None or first is None or progress < first:
        trial.pace_run_id, trial.pace_progress, trial.pace_at = trial.run_id, progress, now
    trial.progress_at = now


# Determined's harness sets a word or two ("training", "validating"); anything longer is refused.
MAX_RUNNER_STATUS = 256


def report_runner_status(ctx: MasterContext, principal: Principal, trial_id: int, status: str) -> None:
    """What the trial's harness says it is doing (Determined's runner metadata)."""
    if len(status) > MAX_RUNNER_STATUS:
        raise InvalidArgument(f"metadata.state: at most {MAX_RUNNER_STATUS} characters, not {len(status)}")
    with ctx.unit_of_work() as w:
        trial = reporting_trial(w, principal, trial_id)
        trial.runner_status = status


EARLY_EXIT_REASONS = {"INVALID_HP", "INIT_INVALID_HP", "USER_REQUESTED_STOP"}


def report_early_exit(ctx: MasterContext, principal: Principal, trial_id: int, reason: str) -> None:
    if reason not in EARLY_EXIT_REASONS:
        raise InvalidArgument(f"early_exit.reason: must be one of {', '.join(sorted(EARLY_EXIT_REASONS))}")
    with ctx.unit_of_work() as w:
        trial = reporting_trial(w, principal, trial_id)
        if trial.early_exit_reason == reason:
            return  # a retry of a report that was stored (its answer lost): already done
        if trial.early_exit_reason:
            raise FailedPrecondition(
                f"trial {trial_id} already reported an early exit ({trial.early_exit_reason})"
            )
        trial.early_exit_reason = reason
        exp = w.session.get_one(models.Experiment, trial.experiment_id)
        event = spb.SearcherEvent(
            trial_exited_early=spb.TrialExitedEarly(
                request_id=trial.request_id, reason=searcher_outbox.EARLY_EXIT_EVENT_REASONS[reason]
            )
        )
        searcher_outbox.enqueue(ctx, w, exp.id, event)
