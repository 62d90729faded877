"""Applying a searcher's answer: its actions and its snapshot, in the caller's transaction."""

from __future__ import annotations

from google.protobuf import json_format
from sqlalchemy import select

from cairn.searcher.v1 import searcher_pb2 as spb
from services.common.logging import get_logger
from services.master.domain import experiments as experiment_lifecycle
from services.master.domain import searcher_outbox, trial_tasks
from services.master.domain import trials as trial_lifecycle
from services.master.domain.clock import utcnow
from services.master.domain.context import MasterContext, Work
from services.master.domain.hparams import typed_hparams
from services.master.domain.states import TERMINAL, RunState
from services.master.store import models

log = get_logger(__name__)

S = RunState


def store_snapshot(w: Work, experiment_id: int, snapshot: spb.Snapshot) -> None:
    w.session.merge(
        models.SearcherSnapshot(
            experiment_id=experiment_id,
            seq=snapshot.seq,
            method=snapshot.method,
            version=snapshot.version,
            state=snapshot.state,
            updated_at=utcnow(),
        )
    )


def _trial_by_request(w: Work, exp: models.Experiment, request_id: str) -> models.Trial | None:
    return w.session.scalar(
        select(models.Trial).where(
            models.Trial.experiment_id == exp.id, models.Trial.request_id == request_id
        )
    )


def apply_response(
    ctx: MasterContext, w: Work, exp: models.Experiment, response: spb.SearcherResponse
) -> None:
    store_snapshot(w, exp.id, response.snapshot)
    exp.progress = max(0.0, min(1.0, response.progress))
    for action in response.actions:
        kind = action.WhichOneof("action")
        if kind == "create":
            _create_trial(ctx, w, exp, action.create)
        elif kind == "stop":
            _stop_trial(ctx, w, exp, action.stop.request_id)
        elif kind == "set_target":
            _set_target(ctx, w, exp, action.set_target)
        elif kind == "shutdown":
            experiment_lifecycle.shutdown_search(
                ctx, w, exp, cancel=action.shutdown.cancel, failure=action.shutdown.failure
            )


def _create_trial(ctx: MasterContext, w: Work, exp: models.Experiment, create: spb.CreateTrial) -> None:
    if exp.state not in (S.ACTIVE, S.PAUSED):
        log.info("ignoring trial creation: experiment is stopping", experiment_id=exp.id, state=exp.state)
        return
    if _trial_by_request(w, exp, create.request_id) is not None:
        return  # already applied (a retried answer)
    trial = models.Trial(
        experiment_id=exp.id,
        request_id=create.request_id,
        state=S.ACTIVE if exp.state == S.ACTIVE else S.PAUSED,
        hparams=typed_hparams(
            json_format.MessageToDict(create.hparams), exp.config.get("hyperparameters") or {}
        ),
        seed=create.trial_seed,
        restarts=0,
        run_id=0,
        start_time=utcnow(),
        total_batches=0,
        searcher_target=create.target_length,
        searcher_stopped=False,
        progress=0.0,
        summary_metrics={},
    )
    w.session.add(trial)
    w.session.flush()
    trial_tasks.record(w, exp, trial)
    log.info("trial created", experiment_id=exp.id, trial_id=trial.id, request_id=create.request_id)
    searcher_outbox.enqueue(
        ctx, w, exp.id, spb.SearcherEvent(trial_created=spb.TrialCreated(request_id=create.request_id))
    )
    trial_lifecycle.ensure_running(ctx, w, trial, exp)


def _stop_trial(ctx: MasterContext, w: Work, exp: models.Experiment, request_id: str) -> None:
    trial = _trial_by_request(w, exp, request_id)
    if trial is None or trial.state in TERMINAL:
        return
    trial.searcher_stopped = True
    if trial.state in (S.ACTIVE, S.PAUSED):
        trial_lifecycle.stop(ctx, w, trial, exp, S.STOPPING_COMPLETED)


def _set_target(ctx: MasterContext, w: Work, exp: models.Experiment, target: spb.SetTrialTarget) -> None:
    trial = _trial_by_request(w, exp, target.request_id)
    if trial is None or trial.state in TERMINAL:
        return
    trial.searcher_target = target.target_length
    trial_lifecycle.ensure_running(ctx, w, trial, exp)
