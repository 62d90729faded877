"""The searcher outbox (trials/searcher_outbox.py): the events a unit of work owes are written in its
transaction, in the order owed, in one statement before it commits; an experiment's search that
ends drops what the unit still owed it; a unit that fails writes none."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, func, select

from cairn.searcher.v1 import searcher_pb2 as spb
from services.master.domain.trials import searcher_outbox
from services.master.store import models
from tests.unit.master.domain.harness import Master


def _exited(request_id: str) -> spb.SearcherEvent:
    return spb.SearcherEvent(trial_exited=spb.TrialExited(request_id=request_id))


def _stored_after(master: Master, after_id: int) -> list[tuple[int, str]]:
    """(experiment, request id) of each event stored after `after_id`, in the pump's order."""
    with master.db.read() as s:
        rows = s.execute(
            select(models.SearcherEvent.experiment_id, models.SearcherEvent.payload)
            .where(models.SearcherEvent.id > after_id)
            .order_by(models.SearcherEvent.id)
        ).all()
    return [
        (exp_id, spb.SearcherEvent.FromString(payload).trial_exited.request_id) for exp_id, payload in rows
    ]


def _last_id(master: Master) -> int:
    with master.db.read() as s:
        return s.scalar(select(func.coalesce(func.max(models.SearcherEvent.id), 0))) or 0


@contextmanager
def _outbox_inserts(master: Master) -> Iterator[list[str]]:
    """The INSERTs into the outbox the database driver was handed (an executemany on SQLite, a
    many-row VALUES on PostgreSQL: one statement either way)."""
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO SEARCHER_EVENTS"):
            seen.append(statement)

    event.listen(master.db.engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(master.db.engine, "before_cursor_execute", count)


def test_a_units_events_are_written_in_order_in_one_statement(
    master_on_each_database: Master,
) -> None:
    master = master_on_each_database
    first, second = master.create(), master.create()
    before = _last_id(master)
    with _outbox_inserts(master) as inserts, master.ctx.unit_of_work() as w:
        searcher_outbox.enqueue(master.ctx, w, first, _exited("a"))
        searcher_outbox.enqueue_many(master.ctx, w, second, [_exited("b"), _exited("c")])
        searcher_outbox.enqueue(master.ctx, w, first, _exited("d"))
    assert _stored_after(master, before) == [(first, "a"), (second, "b"), (second, "c"), (first, "d")]
    assert len(inserts) == 1


def test_a_search_that_ends_drops_what_its_unit_still_owed(master_on_each_database: Master) -> None:
    master = master_on_each_database
    ending, other = master.create(), master.create()
    before = _last_id(master)
    with master.ctx.unit_of_work() as w:
        searcher_outbox.enqueue(master.ctx, w, ending, _exited("written"))
        searcher_outbox.write_owed(w)
        searcher_outbox.enqueue(master.ctx, w, ending, _exited("owed"))
        searcher_outbox.enqueue(master.ctx, w, other, _exited("kept"))
        searcher_outbox.forget(w, ending)
    assert _stored_after(master, before) == [(other, "kept")]
    with master.db.read() as s:
        assert not s.scalars(
            select(models.SearcherEvent).where(models.SearcherEvent.experiment_id == ending)
        ).all()


def test_a_unit_that_fails_writes_none_of_its_events(master: Master) -> None:
    experiment_id = master.create()
    before = _last_id(master)
    with pytest.raises(RuntimeError, match="the unit fails"), master.ctx.unit_of_work() as w:
        searcher_outbox.enqueue(master.ctx, w, experiment_id, _exited("lost"))
        searcher_outbox.write_owed(w)
        searcher_outbox.enqueue(master.ctx, w, experiment_id, _exited("never written"))
        raise RuntimeError("the unit fails")
    assert _stored_after(master, before) == []
