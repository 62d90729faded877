"""The outbox of searcher events: written in the transaction that causes them, delivered in order by
the searcher pump (searcher_pump.py), removed in the transaction that applies the searcher's answer,
so no event is lost or applied twice across restarts of either process."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert

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


# Written as a Core INSERT on the unit's connection, not an ORM object: nothing in the master reads
# an event back as an object in the transaction that wrote it, and the ORM's insert of one (its
# unit-of-work bookkeeping, and on SQLite a statement of its own to learn the generated id) cost
# about twice the statement. The row is in the transaction at once, so a read that follows in it
# sees it, as an autoflush would have made it.
_INSERT = insert(models.SearcherEvent)


def enqueue(ctx: MasterContext, w: Work, experiment_id: int, event: spb.SearcherEvent) -> None:
    """Owe the searcher `event`; never for an unmanaged experiment, which has no search session
    (the one guard every event passes, so no path can reach a searcher for it)."""
    enqueue_many(ctx, w, experiment_id, [event])


def enqueue_many(
    ctx: MasterContext, w: Work, experiment_id: int, events: Sequence[spb.SearcherEvent]
) -> None:
    """Owe the searcher `events`, in their order, in one statement (a grid's creation owes one
    for each of its trials)."""
    exp = w.session.get(models.Experiment, experiment_id)
    if not events or (exp is not None and exp.unmanaged):
        return
    now = utcnow()
    rows = [
        {"experiment_id": experiment_id, "payload": event.SerializeToString(), "created_at": now}
        for event in events
    ]
    # One row as a plain execute; many as one executemany, whose rows the database numbers in
    # their order (the pump delivers by id).
    w.session.connection().execute(_INSERT, rows[0] if len(rows) == 1 else rows)
    w.later(ctx.pump_wakeup.set)
