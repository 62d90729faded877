"""The outbox of searcher events: written in the transaction that causes them, delivered in order by
the searcher pump (searcher_pump.py), removed in the transaction that applies the searcher's answer,
so no event is lost or applied twice across restarts of either process."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, insert

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
# about twice the statement.
_INSERT = insert(models.SearcherEvent)

# The rows a unit of work owes the outbox, written together just before it commits (`write_owed`):
# a batch of agents' reports that ends 40 trials writes their 40 events in one statement, not 40.
_OWED = "searcher_outbox.owed"


def enqueue(ctx: MasterContext, w: Work, experiment_id: int, event: spb.SearcherEvent) -> None:
    """Owe the searcher `event`; never for an unmanaged experiment, which has no search session
    (the one guard every event passes, so no path can reach a searcher for it)."""
    enqueue_many(ctx, w, experiment_id, [event])


def enqueue_many(
    ctx: MasterContext, w: Work, experiment_id: int, events: Sequence[spb.SearcherEvent]
) -> None:
    """Owe the searcher `events`, in their order, after every event the unit owed before them.
    They are written in the unit's transaction before it commits (or sooner, by `write_owed`)."""
    exp = w.session.get(models.Experiment, experiment_id)
    if not events or (exp is not None and exp.unmanaged):
        return
    now = utcnow()
    owed = w.memo.get(_OWED)
    if not isinstance(owed, list):
        owed = w.memo[_OWED] = []
        w.later(ctx.pump_wakeup.set)
    owed.extend(
        {"experiment_id": experiment_id, "payload": event.SerializeToString(), "created_at": now}
        for event in events
    )
    w.once_before_commit(_OWED, lambda: write_owed(w))


def write_owed(w: Work) -> None:
    """Write the events the unit owes, in the order it owed them, in one statement: a many-row
    insert, whose rows the database numbers in their order (the pump delivers by id). Before the
    commit, and before any statement of the unit that reads or removes the outbox."""
    rows = w.memo.pop(_OWED, None)
    if isinstance(rows, list) and rows:
        w.session.connection().execute(_INSERT, rows[0] if len(rows) == 1 else rows)


def forget(w: Work, experiment_id: int) -> None:
    """Drop every event owed to the experiment's searcher, written or still owed by this unit (its
    search is over, or starts again with a new session)."""
    owed = w.memo.get(_OWED)
    if isinstance(owed, list):
        owed[:] = [row for row in owed if row["experiment_id"] != experiment_id]
    w.session.execute(delete(models.SearcherEvent).where(models.SearcherEvent.experiment_id == experiment_id))
