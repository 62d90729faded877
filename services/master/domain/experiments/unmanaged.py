"""Unmanaged experiments: Determined's Core API v2 run outside the cluster (a plain `python script.py`
with a logged-in user). Its code creates the experiment (by an external id, to resume it later),
creates its trials, announces each run (StartTrial) and sets the trials' states itself (PatchTrial,
which is also its heartbeat); the experiment's state follows its trials'.

The master never schedules such an experiment nor asks a searcher about it: it has no search
session and no model definition to run, its trials never request an allocation (nothing here
calls the trial lifecycle's ensure_running), and the searcher outbox drops its events
(searcher_outbox.enqueue). So nothing preempts or restarts its trials; the one thing the master
does by itself is mark a trial whose code went silent (no heartbeat for LOST_AFTER) as ERROR.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.config.bounds import check_json_value
from services.master.domain.config.errors import ConfigError
from services.master.domain.config.policies import check_config_policy
from services.master.domain.experiments import experiment_projects, experiments
from services.master.domain.experiments.creation import check_pool, expanded_config, store_experiment
from services.master.domain.experiments.input_limits import check_experiment_limits
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import FailedPrecondition, InvalidArgument
from services.master.domain.kernel.loops import BackgroundLoop
from services.master.domain.kernel.states import TERMINAL, RunState
from services.master.domain.task_kinds import model_definition
from services.master.domain.trials import trial_tasks
from services.master.domain.trials import trials as trial_lifecycle
from services.master.store import models

log = get_logger(__name__)

S = RunState

# External ids are the code's own names: bounded before anything is stored. A trial's external id
# is its request id, which also names its task ("<experiment id>.<external trial id>").
MAX_EXTERNAL_EXPERIMENT_ID = 128
MAX_EXTERNAL_TRIAL_ID = 64
# Determined's: a RUNNING unmanaged trial without a heartbeat for this long has lost its code.
LOST_AFTER = timedelta(minutes=5)
LOST_CHECK_S = 60.0

# The experiment takes its most progressed trial's state (Determined's order); a canceled trial
# counts for less than an errored one.
_PROGRESS_ORDER = {S.PAUSED: 10, S.CANCELED: 15, S.ERROR: 20, S.COMPLETED: 30, S.ACTIVE: 40}


@dataclass(frozen=True)
class CreatedExperiment:
    experiment_id: int
    config: dict[str, Any]


def _check_external_id(value: str, field: str, limit: int) -> str:
    if not value or not value.strip():
        raise InvalidArgument(f"{field}: required, a non-empty id")
    if len(value) > limit:
        raise InvalidArgument(f"{field}: at most {limit} characters (got {len(value)})")
    if any(ch in value for ch in "/\x00") or not value.isprintable():
        raise InvalidArgument(f"{field}: printable characters other than '/' only")
    return value


def create_experiment(
    ctx: MasterContext,
    principal: Principal,
    config_text: str,
    *,
    external_id: str | None = None,
    project_id: int = 0,
) -> CreatedExperiment:
    """A new unmanaged experiment; with `external_id`, the one already known by it when there is
    one (its code re-run resumes it), else a new one under it."""
    if principal.user_id is None:
        raise InvalidArgument("only a user can create experiments")
    if external_id is not None:
        _check_external_id(external_id, "external_experiment_id", MAX_EXTERNAL_EXPERIMENT_ID)
    parsed = experiment_projects.parsed_or_none(config_text)
    place = experiment_projects.placement(ctx, project_id, parsed)
    with ctx.db.read() as s:
        project = s.get_one(models.Project, place.project_id)
        experiment_projects.check_may_create_in(s, principal, project, "project_id")
    config = expanded_config(ctx, config_text, None, place, unmanaged=True, parsed=parsed)
    check_experiment_limits(config, ctx.settings.max_trials_per_experiment)
    check_config_policy(ctx.settings, principal, config)
    pool = check_pool(ctx, config, place)
    archive = model_definition.pack([], 0)
    with ctx.unit_of_work() as w:
        if external_id is not None:
            found = w.session.scalar(
                select(models.Experiment).where(models.Experiment.external_experiment_id == external_id)
            )
            if found is not None:
                return CreatedExperiment(_resumable(w.session, principal, found, external_id), found.config)
        exp = models.Experiment(
            name=str(config.get("name") or f"unmanaged-{uuid.uuid4().hex[:8]}"),
            description=str(config.get("description") or ""),
            labels=list(config.get("labels") or []),
            # Determined's: PAUSED until a trial's code says it runs.
            state=S.PAUSED,
            archived=False,
            config=config,
            original_config=config_text,
            owner_id=principal.user_id,
            start_time=utcnow(),
            progress=0.0,
            resource_pool=pool,
            searcher_session_id="",
            model_definition_size=len(archive),
            notes="",
            parent_id=None,
            project_id=place.project_id,
            unmanaged=True,
            external_experiment_id=external_id,
        )
        store_experiment(w, exp, archive)
        experiment_id = exp.id
    log.info(
        "unmanaged experiment created",
        experiment_id=experiment_id,
        external_id=external_id,
        user=principal.username,
    )
    return CreatedExperiment(experiment_id, config)


def _resumable(s: Session, principal: Principal, exp: models.Experiment, external_id: str) -> int:
    if exp.state in (S.DELETING, S.DELETED, S.DELETE_FAILED):
        raise FailedPrecondition(
            f"external_experiment_id: experiment {exp.id} ({external_id!r}) is being deleted"
        )
    access.check_experiment(s, principal, exp, Permission.UPDATE_EXPERIMENT)
    return exp.id


def _unmanaged_experiment(w: Work, principal: Principal, experiment_id: int, field: str) -> models.Experiment:
    exp = experiments.load(w, experiment_id)
    access.check_experiment(w.session, principal, exp, Permission.UPDATE_EXPERIMENT)
    if not exp.unmanaged:
        raise FailedPrecondition(
            f"{field}: experiment {exp.id} is managed by the master; only an unmanaged experiment's "
            "code creates and moves its trials"
        )
    return exp


def _trial_of(w: Work, principal: Principal, trial_id: int) -> tuple[models.Trial, models.Experiment]:
    trial = trial_lifecycle.load(w, trial_id)
    return trial, _unmanaged_experiment(w, principal, trial.experiment_id, "trial_id")


def create_trial(
    ctx: MasterContext,
    principal: Principal,
    experiment_id: int,
    hparams: dict[str, Any],
    *,
    external_id: str | None = None,
) -> int:
    """A new trial of the unmanaged experiment; with `external_id`, the one already known by it in
    that experiment when there is one. It starts PAUSED, as Determined's, until its code reports."""
    if external_id is not None:
        _check_external_id(external_id, "external_trial_id", MAX_EXTERNAL_TRIAL_ID)
    try:
        check_json_value(hparams)
    except ConfigError as exc:
        raise InvalidArgument(f"hparams: {exc}") from None
    with ctx.unit_of_work() as w:
        exp = _unmanaged_experiment(w, principal, experiment_id, "experiment_id")
        if external_id is not None:
            found = w.session.scalar(
                select(models.Trial).where(
                    models.Trial.experiment_id == exp.id, models.Trial.request_id == external_id
                )
            )
            if found is not None:
                return found.id
        trial = models.Trial(
            experiment_id=exp.id,
            request_id=external_id if external_id is not None else uuid.uuid4().hex,
            state=S.PAUSED,
            hparams=hparams,
            seed=0,
            restarts=0,
            run_id=0,
            start_time=utcnow(),
            total_batches=0,
            searcher_target=0,
            searcher_stopped=False,
            progress=0.0,
            summary_metrics={},
        )
        w.session.add(trial)
        w.session.flush()
        trial_tasks.record(w, exp, trial)
        trial_id = trial.id
    log.info(
        "unmanaged trial created", trial_id=trial_id, experiment_id=experiment_id, external_id=external_id
    )
    return trial_id


@dataclass(frozen=True)
class StartedRun:
    run_id: int
    latest_checkpoint: str | None
    steps_completed: int


def start_trial(ctx: MasterContext, principal: Principal, trial_id: int, *, resume: bool) -> StartedRun:
    """The trial's code starts a run: a new run id (reports of earlier runs are refused from now
    on); with `resume`, where it left off (the latest checkpoint and the steps done)."""
    with ctx.unit_of_work() as w:
        trial, _exp = _trial_of(w, principal, trial_id)
        trial.run_id += 1
        trial.last_activity = utcnow()
        started = StartedRun(
            run_id=trial.run_id,
            latest_checkpoint=trial.latest_checkpoint_uuid if resume else None,
            steps_completed=int(trial.total_batches) if resume else 0,
        )
    log.info("unmanaged trial run started", trial_id=trial_id, run_id=started.run_id, resume=resume)
    return started


def patch_trial(ctx: MasterContext, principal: Principal, trial_id: int, state: RunState | None) -> None:
    """The trial's code is alive (a heartbeat), and with `state`, says where it is; the experiment
    follows its trials."""
    with ctx.unit_of_work() as w:
        trial, exp = _trial_of(w, principal, trial_id)
        trial.last_activity = utcnow()
        if state is None or state == trial.state:
            return
        trial_lifecycle.transition(ctx, w, trial, state, "reported by its code")
        follow_trials(ctx, w, exp)


def kill_trial(ctx: MasterContext, w: Work, trial: models.Trial, exp: models.Experiment) -> None:
    """`det trial kill` of an unmanaged trial: nothing of it runs on the cluster to be stopped, so
    it ends CANCELED at once (its code, if still running, may report again)."""
    if trial.state not in TERMINAL:
        trial_lifecycle.transition(ctx, w, trial, S.CANCELED, "killed by a user")
        follow_trials(ctx, w, exp)


def follow_trials(ctx: MasterContext, w: Work, exp: models.Experiment) -> None:
    """The experiment takes its most progressed trial's state (Determined's
    UpdateUnmanagedExperimentStates)."""
    states = [
        RunState(s)
        for s in w.session.scalars(select(models.Trial.state).where(models.Trial.experiment_id == exp.id))
    ]
    ranked = [s for s in states if s in _PROGRESS_ORDER]
    if not ranked:
        return
    target = max(ranked, key=lambda s: _PROGRESS_ORDER[s])
    if target != exp.state:
        experiments.transition(ctx, w, exp, target, "its trials' states")


def mark_lost_trials(ctx: MasterContext) -> list[int]:
    """Running unmanaged trials whose code has not been heard of for LOST_AFTER end ERROR (their
    experiment follows). Returns their ids."""
    cutoff = utcnow() - LOST_AFTER
    lost_query = (
        select(models.Trial.id)
        .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
        .where(
            models.Experiment.unmanaged.is_(True),
            models.Trial.state == S.ACTIVE,
            models.Trial.last_activity < cutoff,
        )
    )
    with ctx.db.read() as s:
        if not s.scalars(lost_query.limit(1)).first():
            return []  # the usual answer, without taking the write lock
    with ctx.unit_of_work() as w:
        ids = list(w.session.scalars(lost_query))
        touched: dict[int, models.Experiment] = {}
        for trial_id in ids:
            trial = w.session.get_one(models.Trial, trial_id)
            trial_lifecycle.transition(ctx, w, trial, S.ERROR, f"no heartbeat from its code for {LOST_AFTER}")
            touched.setdefault(trial.experiment_id, w.session.get_one(models.Experiment, trial.experiment_id))
        for exp in touched.values():
            follow_trials(ctx, w, exp)
    if ids:
        log.warning("unmanaged trials lost their code", trial_ids=ids)
    return ids


def lost_trials_loop(ctx: MasterContext) -> BackgroundLoop:
    """Looks for lost unmanaged trials every LOST_CHECK_S (Determined looks every 5 minutes)."""
    return BackgroundLoop(ctx, "unmanaged-lost-trials", lambda: _mark_lost(ctx), period_s=LOST_CHECK_S)


def _mark_lost(ctx: MasterContext) -> None:
    mark_lost_trials(ctx)


def trial_of_task(ctx: MasterContext, principal: Principal, task_id: str) -> int:
    """The unmanaged trial whose task is `task_id` ("<experiment id>.<external or generated id>"),
    when the caller may change it: where its code's shipped output goes."""
    exp_part, _, request_id = task_id.partition(".")
    with ctx.db.read() as s:
        trial = (
            s.scalar(
                select(models.Trial).where(
                    models.Trial.experiment_id == int(exp_part), models.Trial.request_id == request_id
                )
            )
            if exp_part.isdigit() and request_id
            else None
        )
        exp = s.get(models.Experiment, trial.experiment_id) if trial is not None else None
        if trial is None or exp is None:
            raise InvalidArgument(f"task_id: no trial's task {task_id!r}")
        access.check_experiment(s, principal, exp, Permission.UPDATE_EXPERIMENT)
        if not exp.unmanaged:
            raise FailedPrecondition(
                f"task_id: task {task_id!r} is a managed trial's; its output comes from its containers"
            )
        return trial.id
