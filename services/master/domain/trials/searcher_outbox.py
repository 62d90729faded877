"""The outbox of searcher events: written in the transaction that causes them, delivered in order by
the searcher pump (searcher_pump.py), removed in the transaction that applies the searcher's answer,
so no event is lost or applied twice across restarts of either process."""

from __future__ import annotations

from cairn.searcher.v1 import searcher_pb2 as spb
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.store import models

# What a trial's code may report as its early exit, as the searcher's reasons.
EARLY_EXIT_EVENT_REASONS = {
    "INVALID_HP": spb.TrialExitedEarly.REASON_INVALID_HP,
    "INIT_INVALID_HP": spb.TrialExitedEarly.REASON_INIT_INVALID_HP,
    "USER_REQUESTED_STOP": spb.TrialExitedEarly.REASON_USER_CANCELED,
}


def enqueue(ctx: MasterContext, w: Work, experiment_id: int, event: spb.SearcherEvent) -> None:
    """Owe the searcher `event`; never for an unmanaged experiment, which has no search session
    (the one guard every event passes, so no path can reach a searcher for it)."""
    exp = w.session.get(models.Experiment, experiment_id)
    if exp is not None and exp.unmanaged:
        return
    w.session.add(
        models.SearcherEvent(
            experiment_id=experiment_id, payload=event.SerializeToString(), created_at=utcnow()
        )
    )
    w.later(ctx.pump_wakeup.set)
