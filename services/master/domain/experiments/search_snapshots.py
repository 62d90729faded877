"""Where an experiment's search session stands, as the master stores it (SearcherSnapshot): the
events the session applied (`seq`), and a state to restore it from with the events applied since
(SearcherReplay). A search of 10,000 trials carries megabytes of state, and storing it with every
answer held the master's lock for tens of milliseconds a delivery (searcher_pump.py says when it
is stored).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, delete, insert, update

from cairn.searcher.v1 import searcher_pb2 as spb
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import Work
from services.master.store import models


def store_snapshot(w: Work, experiment_id: int, snapshot: spb.Snapshot) -> None:
    """The experiment's searcher snapshot, stored over the one before with its state (the row the
    caller read is found in the session: no read; Session.merge did the same at several times the
    cost). The events kept to replay on the old state have no further use."""
    row = w.session.get(models.SearcherSnapshot, experiment_id)
    if row is None:
        row = models.SearcherSnapshot(experiment_id=experiment_id)
        w.session.add(row)
    row.seq, row.method, row.version, row.state, row.state_seq = (
        snapshot.seq,
        snapshot.method,
        snapshot.version,
        snapshot.state,
        snapshot.seq,
    )
    row.updated_at = utcnow()
    w.session.execute(_FORGET_REPLAYS, {"of_experiment": experiment_id})


def forget_snapshot(w: Work, experiment_id: int) -> None:
    """The search is over, or starts again with a new session: its snapshot and replays go."""
    w.session.execute(
        delete(models.SearcherSnapshot).where(models.SearcherSnapshot.experiment_id == experiment_id)
    )
    w.session.execute(_FORGET_REPLAYS, {"of_experiment": experiment_id})


_FORGET_REPLAYS = (
    delete(models.SearcherReplay)
    .where(models.SearcherReplay.experiment_id == bindparam("of_experiment"))
    .execution_options(synchronize_session=False)
)
# Either advance is a compare-and-set: the stored snapshot moves only from the seq its caller read.
_ADVANCE_FROM = (
    update(models.SearcherSnapshot)
    .where(
        models.SearcherSnapshot.experiment_id == bindparam("of_experiment"),
        models.SearcherSnapshot.seq == bindparam("from_seq"),
    )
    .execution_options(synchronize_session=False)
)
_ADVANCE = _ADVANCE_FROM.values(
    seq=bindparam("new_seq"),
    method=bindparam("new_method"),
    version=bindparam("new_version"),
    state=bindparam("new_state"),
    state_seq=bindparam("new_seq"),
    updated_at=bindparam("new_updated_at"),
)
_ADVANCE_SEQ = _ADVANCE_FROM.values(seq=bindparam("new_seq"), updated_at=bindparam("new_updated_at"))
# On the table, not the mapped class: one executemany of a row or two, without the ORM's bulk
# insert machinery (a fifth of a delivery's write at a small cluster).
_KEEP_REPLAY = insert(models.Base.metadata.tables[models.SearcherReplay.__tablename__])


def advance_snapshot(w: Work, experiment_id: int, from_seq: int, snapshot: spb.Snapshot) -> bool:
    """Store `snapshot`, its state with it, over the stored one if that is still at `from_seq`
    (one UPDATE: neither the stored state, megabytes for a search of 10,000 trials, nor the row
    is loaded), and drop the replays it covers; False when the search moved on or its snapshot is
    gone (the experiment ended)."""
    advanced = w.session.execute(
        _ADVANCE,
        {
            "of_experiment": experiment_id,
            "from_seq": from_seq,
            "new_seq": snapshot.seq,
            "new_method": snapshot.method,
            "new_version": snapshot.version,
            "new_state": snapshot.state,
            "new_updated_at": utcnow(),
        },
    )
    if advanced.rowcount != 1:  # type: ignore[attr-defined]
        return False
    w.session.execute(_FORGET_REPLAYS, {"of_experiment": experiment_id})
    return True


def advance_seq(w: Work, experiment_id: int, from_seq: int, to_seq: int, events: Sequence[bytes]) -> bool:
    """Advance the stored snapshot from `from_seq` to `to_seq` without its state, keeping the
    events that took it there (serialized, in order) to replay on the stored state; False as for
    advance_snapshot."""
    advanced = w.session.execute(
        _ADVANCE_SEQ,
        {"of_experiment": experiment_id, "from_seq": from_seq, "new_seq": to_seq, "new_updated_at": utcnow()},
    )
    if advanced.rowcount != 1:  # type: ignore[attr-defined]
        return False
    w.session.execute(
        _KEEP_REPLAY, [{"experiment_id": experiment_id, "payload": payload} for payload in events]
    )
    return True
