"""The master's PostgreSQL pool: connections that sat idle are pinged, and replaced when their server
side is gone; connections back from use moments ago are handed out without a ping."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from sqlalchemy import text

from services.master.store import db as db_module
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
