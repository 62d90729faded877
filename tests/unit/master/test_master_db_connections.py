"""The master's PostgreSQL engines: connections that sat idle are pinged, and replaced when their
server side is gone; connections back from use moments ago are handed out without a ping; an update
of many rows goes to the server in batches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, insert, select, text, update

from services.master.store import db as db_module
from services.master.store import json_updates
from services.master.store.db import Database
from tests.support.databases import fresh_database


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Database]:
    with fresh_database("postgres", tmp_path) as url:
        assert url is not None
        database = Database(url)
        try:
            yield database
        finally:
            database.dispose()


@pytest.fixture
def pings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    real = db_module._ping

    def counted(dbapi_connection: Any) -> None:
        seen.append(1)
        real(dbapi_connection)

    monkeypatch.setattr(db_module, "_ping", counted)
    return seen


def _backend_pid(database: Database) -> int:
    with database.read() as s:
        return int(s.scalar(text("SELECT pg_backend_pid()")))


def _terminate(database: Database, pid: int) -> None:
    admin = psycopg2.connect(
        database.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    )
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", (pid,))
    finally:
        admin.close()


def test_a_connection_killed_while_idle_is_replaced_before_use(
    pg: Database, pings: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _backend_pid(pg)
    _terminate(pg, first)
    monkeypatch.setattr(db_module, "PING_AFTER_IDLE_S", 0.0)  # every checkout counts as idle
    second = _backend_pid(pg)
    assert second != first, "the dead connection was handed out again"
    assert pings, "the idle connection was not pinged"


def test_a_connection_back_from_use_moments_ago_is_not_pinged(
    pg: Database, pings: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "PING_AFTER_IDLE_S", 3600.0)
    backends = {_backend_pid(pg) for _ in range(4)}
    assert len(backends) == 1
    assert len(pings) == 1, "only the first checkout (a new connection, never returned) is pinged"


def test_reads_run_outside_a_transaction_and_writes_inside_one(pg: Database) -> None:
    with pg.read() as s:
        # now() is when the transaction began; outside one, that is the statement's own start.
        assert s.scalar(text("SELECT now() = statement_timestamp()")) is True
    with pg.transaction() as s:
        s.execute(text("SELECT pg_sleep(0.01)"))
        assert s.scalar(text("SELECT now() = statement_timestamp()")) is False


def test_reads_leave_the_write_pool_transactional(pg: Database) -> None:
    """Reads have their own autocommit pool: however many ran, a failed transaction still rolls
    back everything it did."""
    for _ in range(5):
        with pg.read() as s:
            s.execute(text("SELECT 1"))
    with pg.transaction() as s:
        s.execute(text("CREATE TABLE rollback_probe (id int)"))
    with pytest.raises(RuntimeError), pg.transaction() as s:
        s.execute(text("INSERT INTO rollback_probe VALUES (1)"))
        raise RuntimeError("abandon")
    with pg.read() as s:
        assert s.scalar(text("SELECT count(*) FROM rollback_probe")) == 0


def test_an_update_of_many_rows_goes_in_one_statement_or_in_batches_not_a_round_trip_a_row(
    pg: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush that ends 40 allocations updates 40 rows of a table with one statement and 40 sets of
    parameters. psycopg2's own executemany sends them one round trip each, while the master holds
    its lock. The write engine sends a by-key UPDATE as one statement over a JSON document of the
    rows (store/json_updates.py), and any other shape through psycopg2's execute_batch (100
    statements a round trip)."""
    table = Table("batch_probe", MetaData(), Column("id", Integer, primary_key=True), Column("state", String))
    table.create(pg.engine)
    with pg.transaction() as s:
        s.execute(insert(table), [{"id": n, "state": "RUNNING"} for n in range(40)])
    batches: list[int] = []
    real = psycopg2.extras.execute_batch

    def counted(cursor: Any, statement: str, argslist: Any, page_size: int = 100) -> None:
        rows = list(argslist)
        batches.append(len(rows))
        real(cursor, statement, rows, page_size=page_size)

    monkeypatch.setattr(psycopg2.extras, "execute_batch", counted)
    sent = json_updates.SENT["statements"]
    with pg.transaction() as s:
        s.execute(
            update(table).where(table.c.id == bindparam("row")).values(state=bindparam("to")),
            [{"row": n, "to": "TERMINATED"} for n in range(40)],
        )
    assert batches == [] and json_updates.SENT["statements"] == sent + 1
    with pg.read() as s:
        assert s.scalars(select(table.c.state).distinct()).all() == ["TERMINATED"]

    with pg.transaction() as s:  # a shape of its own: two conditions
        s.execute(
            update(table)
            .where(table.c.id == bindparam("row"), table.c.state == bindparam("from"))
            .values(state=bindparam("to")),
            [{"row": n, "from": "TERMINATED", "to": "DELETED"} for n in range(40)],
        )
    assert batches == [40] and json_updates.SENT["statements"] == sent + 1
    with pg.read() as s:
        assert s.scalars(select(table.c.state).distinct()).all() == ["DELETED"]
