"""A continued search asking again for the trials its experiment already has (Determined's
continueTrials, experiment.go): `det experiment continue` on a grid or random search starts the
search as a new session of the same spec, which, deterministic in its seed, asks for the same trials
by the same request ids. Each trial an earlier session asked for is, when the new one asks for it:

- COMPLETED: kept as it is; the new session hears it was created and has exited, so the search
  counts it done and goes on (as Determined closes a completed trial without running it);
- ended otherwise (ERROR, CANCELED): retried in place from its latest checkpoint, the same trial id
  with its metrics and checkpoints kept, its restarts counted from zero and its end time cleared;
- still live (the single searcher's trial, reopened by continuation.py itself): only noted as asked.

A trial the same session asks for twice is a retried answer, applied once (searcher_actions.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from cairn.searcher.v1 import searcher_pb2 as spb
from services.common.logging import get_logger
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.states import TERMINAL, RunState
from services.master.domain.trials import searcher_outbox
from services.master.domain.trials import trials as trial_lifecycle
from services.master.store import models

log = get_logger(__name__)

S = RunState


def asked_again(ctx: MasterContext, w: Work, exp: models.Experiment, request_ids: Sequence[str]) -> None:
    """The experiment's current search session asked for these existing trials (in this order),
    which an earlier session made."""
    if not request_ids:
        return
    by_request = {
        trial.request_id: trial
        for trial in w.session.scalars(
            select(models.Trial).where(
                models.Trial.experiment_id == exp.id, models.Trial.request_id.in_(list(request_ids))
            )
        )
    }
    for request_id in request_ids:
        trial = by_request.get(request_id)
        if trial is None or trial.search_session_id == exp.searcher_session_id:
            continue
        trial.search_session_id = exp.searcher_session_id
        created = spb.SearcherEvent(trial_created=spb.TrialCreated(request_id=request_id))
        if trial.state == S.COMPLETED:
            searcher_outbox.enqueue(ctx, w, exp.id, created)
            exited = spb.SearcherEvent(trial_exited=spb.TrialExited(request_id=request_id))
            searcher_outbox.enqueue(ctx, w, exp.id, exited)
            log.info("continued search keeps completed trial", experiment_id=exp.id, trial_id=trial.id)
        elif trial.state in TERMINAL:
            _retry(ctx, w, exp, trial)
            searcher_outbox.enqueue(ctx, w, exp.id, created)
            log.info(
                "continued search retries trial", experiment_id=exp.id, trial_id=trial.id, was=trial.state
            )


def _retry(ctx: MasterContext, w: Work, exp: models.Experiment, trial: models.Trial) -> None:
    # As Determined: the restarts of earlier runs no longer count against max_restarts.
    trial.restarts = 0
    trial.searcher_stopped = False
    trial.early_exit_reason = None
    trial_lifecycle.transition(ctx, w, trial, S.ACTIVE, "experiment continued", continuing=True)
    if exp.state == S.PAUSED:
        trial_lifecycle.pause(ctx, w, trial, live=None)
        return
    trial_lifecycle.ensure_running(ctx, w, trial, exp, live=None)
