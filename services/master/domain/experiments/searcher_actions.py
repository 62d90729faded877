"""Applying a searcher's answer: its actions and its snapshot, in the caller's transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from google.protobuf import json_format
from sqlalchemy import bindparam, select

from cairn.searcher.v1 import searcher_pb2 as spb
from services.common.logging import get_logger
from services.master.domain.experiments import experiments as experiment_lifecycle
from services.master.domain.experiments import search_retries
from services.master.domain.experiments.search_snapshots import store_snapshot
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.states import TERMINAL, RunState
from services.master.domain.kernel.topics import trial_topic
from services.master.domain.trials import searcher_outbox, trial_tasks
from services.master.domain.trials import trials as trial_lifecycle
from services.master.domain.trials.hparams import HparamTyper
from services.master.store import models
from services.master.store.inserted import insert_returning

log = get_logger(__name__)

S = RunState
# An answer creating more trials than this is applied in part in the call that got it, the rest
# by the searcher pump in chunks of STORED_CHUNK_CREATES trials, a transaction each.
INLINE_CREATES = 500
STORED_CHUNK_CREATES = 1000
# Up to this many request ids are looked up by name; more, and the experiment's are all read.
_IN_LIST_MAX = 500


# Reads of every answer applied, built once.
_OLDEST_ANSWER = (
    select(models.SearcherAnswer)
    .where(models.SearcherAnswer.experiment_id == bindparam("experiment_id"))
    .order_by(models.SearcherAnswer.id)
    .limit(1)
)
_ALL_REQUESTS_MADE = select(models.Trial.request_id, models.Trial.search_session_id).where(
    models.Trial.experiment_id == bindparam("experiment_id")
)
_REQUESTS_MADE = _ALL_REQUESTS_MADE.where(
    models.Trial.request_id.in_(bindparam("request_ids", expanding=True))
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
    apply_actions(ctx, w, exp, response.actions)


def apply_response_in_part(
    ctx: MasterContext,
    w: Work,
    exp: models.Experiment,
    response: spb.SearcherResponse,
    *,
    snapshot_stored: bool = False,
) -> bool:
    """apply_response for an answer of any size: its snapshot (unless the caller stored it:
    `snapshot_stored`) and its first INLINE_CREATES trials' worth of actions now, the rest stored
    (SearcherAnswer) for the searcher pump to apply in chunks after this transaction commits, so a
    call that creates an experiment of 10,000 trials returns at once and the experiment's first
    trials queue with it. Whether a rest was stored."""
    if not snapshot_stored:
        store_snapshot(w, exp.id, response.snapshot)
    cut = _cut_after_creates(response.actions, INLINE_CREATES)
    if cut >= len(response.actions):
        exp.progress = max(0.0, min(1.0, response.progress))
        apply_actions(ctx, w, exp, response.actions)
        return False
    exp.progress = max(0.0, min(1.0, response.progress))
    apply_actions(ctx, w, exp, response.actions[:cut])
    rest = spb.SearcherResponse(actions=response.actions[cut:])
    w.session.add(
        models.SearcherAnswer(experiment_id=exp.id, payload=rest.SerializeToString(), created_at=utcnow())
    )
    w.later(ctx.pump_wakeup.set)
    log.info(
        "applying the rest of the searcher's answer after the call",
        experiment_id=exp.id,
        actions_now=cut,
        actions_later=len(rest.actions),
    )
    return True


def apply_stored_chunk(ctx: MasterContext, w: Work, experiment_id: int) -> bool:
    """Apply the next STORED_CHUNK_CREATES trials' worth of the experiment's oldest stored answer,
    storing what is left (or removing it); False when none is stored."""
    row = w.session.scalar(_OLDEST_ANSWER, {"experiment_id": experiment_id})
    if row is None:
        return False
    exp = w.session.get_one(models.Experiment, experiment_id)
    actions = spb.SearcherResponse.FromString(row.payload).actions
    cut = _cut_after_creates(actions, STORED_CHUNK_CREATES)
    apply_actions(ctx, w, exp, actions[:cut])
    if cut >= len(actions):
        w.session.delete(row)
    else:
        row.payload = spb.SearcherResponse(actions=actions[cut:]).SerializeToString()
    return True


def _cut_after_creates(actions: Sequence[spb.SearcherAction], creates: int) -> int:
    """How many of `actions` come up to and including the `creates`-th creation (all of them when
    there are no more creations than that)."""
    seen = 0
    for index, action in enumerate(actions):
        if action.WhichOneof("action") == "create":
            seen += 1
            if seen == creates:
                return index + 1
    return len(actions)


def apply_actions(
    ctx: MasterContext, w: Work, exp: models.Experiment, actions: Sequence[spb.SearcherAction]
) -> None:
    creates: list[spb.CreateTrial] = []
    for action in actions:
        kind = action.WhichOneof("action")
        if kind == "create":
            creates.append(action.create)  # a run of creations is made in one go
            continue
        if creates:
            _create_trials(ctx, w, exp, creates)
            creates = []
        if kind == "stop":
            _stop_trial(ctx, w, exp, action.stop.request_id)
        elif kind == "set_target":
            _set_target(ctx, w, exp, action.set_target)
        elif kind == "shutdown":
            experiment_lifecycle.shutdown_search(
                ctx, w, exp, cancel=action.shutdown.cancel, failure=action.shutdown.failure
            )
    if creates:
        _create_trials(ctx, w, exp, creates)


def _create_trials(
    ctx: MasterContext, w: Work, exp: models.Experiment, creates: list[spb.CreateTrial]
) -> None:
    """Trials for a run of the searcher's creations, set-based: one query for those already made
    (a retried answer), one INSERT for the new trials, one for their tasks, one
    for their searcher events and one for their allocation requests (an experiment of 10,000
    trials is made in a few statements, not tens of thousands)."""
    if exp.state not in (S.ACTIVE, S.PAUSED):
        log.info("ignoring trial creation: experiment is stopping", experiment_id=exp.id, state=exp.state)
        return
    wanted = {create.request_id for create in creates}
    if len(wanted) <= _IN_LIST_MAX:
        made = w.session.execute(_REQUESTS_MADE, {"experiment_id": exp.id, "request_ids": list(wanted)})
    else:
        made = w.session.execute(_ALL_REQUESTS_MADE, {"experiment_id": exp.id})
    asked_by = {row.request_id: row.search_session_id for row in made}
    existing = set(asked_by)
    # Trials an earlier session made, asked for again by a continued search (search_retries.py).
    search_retries.asked_again(
        ctx,
        w,
        exp,
        [
            c.request_id
            for c in creates
            if c.request_id in asked_by and asked_by[c.request_id] != exp.searcher_session_id
        ],
    )
    typer = HparamTyper(exp.config.get("hyperparameters") or {})
    state = S.ACTIVE if exp.state == S.ACTIVE else S.PAUSED
    now = utcnow()
    rows: list[dict[str, Any]] = []
    for create in creates:
        if create.request_id in existing:
            continue  # already applied (a retried answer)
        existing.add(create.request_id)
        rows.append(
            {
                "experiment_id": exp.id,
                "request_id": create.request_id,
                "search_session_id": exp.searcher_session_id,
                "warm_start_checkpoint_uuid": exp.warm_start_checkpoint_uuid,
                "state": state,
                "hparams": typer.typed(json_format.MessageToDict(create.hparams)),
                "seed": create.trial_seed,
                "restarts": 0,
                "run_id": 0,
                # A microsecond apart: their allocations queue in the order the searcher made them.
                "start_time": now + timedelta(microseconds=len(rows)),
                "total_batches": 0,
                "searcher_target": create.target_length,
                "searcher_stopped": False,
                "progress": 0.0,
                "summary_metrics": {},
            }
        )
    if not rows:
        return
    # One INSERT (store/inserted.py); request ids are unique within an experiment. Trials are not
    # among the rows a scheduling pass or a stream watches.
    trials = insert_returning(w.session, models.Trial, rows, "request_id")
    trial_tasks.insert_many(w, exp, trials)  # before their allocations (their foreign key)
    searcher_outbox.enqueue_many(
        ctx,
        w,
        exp.id,
        [spb.SearcherEvent(trial_created=spb.TrialCreated(request_id=trial.request_id)) for trial in trials],
    )
    if len(trials) == 1:
        log.info(
            "trial created", experiment_id=exp.id, trial_id=trials[0].id, request_id=trials[0].request_id
        )
    else:
        log.info(
            "trials created",
            experiment_id=exp.id,
            count=len(trials),
            trial_ids=f"{trials[0].id}..{trials[-1].id}",
        )
    # New trials have no allocation yet: request one for each that should run.
    trial_lifecycle.request_allocations(ctx, w, trials, exp)


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
    if trial.searcher_target != target.target_length:
        trial.searcher_target = target.target_length
        # A running trial's signal watch hears of its new target now, not at its next re-read.
        topic = trial_topic(trial.id)
        w.later(lambda: ctx.topics.publish(topic))
    trial_lifecycle.ensure_running(ctx, w, trial, exp)
