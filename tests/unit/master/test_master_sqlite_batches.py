"""Many rows' INSERT, UPDATE or DELETE on SQLite go as one statement (store/sqlite_batches.py):
the rows written are those executemany would write, the ORM still sees a row that was not there,
and statements of other shapes, or rows one statement cannot take, go to executemany as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import String, bindparam, event, select, text, update
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.orm.exc import StaleDataError

from services.master.store import sqlite_batches
from services.master.store.db import Database


class Base(DeclarativeBase):
    pass


class Row(Base):
    __tablename__ = "rows"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    state: Mapped[str] = mapped_column(String(32))
    count: Mapped[int]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[Database, list[str]]]:
    """A master's SQLite database with the table above, and the statements SQLite ran, as its trace
    reports them (executemany: one a row)."""
    database = Database(f"sqlite:///{tmp_path / 'cairn.db'}")
    Base.metadata.create_all(database.engine)
    database.engine.dispose()
    ran: list[str] = []

    @event.listens_for(database.engine, "connect")
    def _trace(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(ran.append)

    yield database, ran
    database.engine.dispose()


def _writes(ran: list[str]) -> list[str]:
    return [
        statement.split(" ")[0] for statement in ran if statement.startswith(("INSERT", "UPDATE", "DELETE"))
    ]


def _rows(database: Database) -> list[tuple[str, str, int]]:
    with database.read() as s:
        return [
            (key, state, count)
            for key, state, count in s.execute(select(Row.id, Row.state, Row.count).order_by(Row.id))
        ]


def test_a_flush_of_many_rows_is_one_statement_a_kind_and_writes_what_executemany_would(db: Any) -> None:
    database, ran = db
    with database.transaction() as s:
        s.add_all(Row(id=f"r{i:03}", state="PENDING", count=i) for i in range(300))
    with database.transaction() as s:
        for row in s.scalars(select(Row).where(Row.count < 200)):
            row.state, row.count = "RUNNING", row.count + 1000
    with database.transaction() as s:
        for row in s.scalars(select(Row).where(Row.count >= 1100)):
            s.delete(row)
    # One INSERT of 300 rows, one UPDATE of 200, one DELETE of 100: no row at a time.
    assert _writes(ran) == ["INSERT", "UPDATE", "DELETE"]
    assert "FROM (VALUES" in next(statement for statement in ran if statement.startswith("UPDATE"))
    expected = [(f"r{i:03}", "RUNNING", i + 1000) for i in range(100)]
    expected += [(f"r{i:03}", "PENDING", i) for i in range(200, 300)]
    assert _rows(database) == expected


def test_a_row_that_is_gone_still_fails_the_flush(db: Any) -> None:
    database, _ran = db
    with database.transaction() as s:
        s.add_all(Row(id=f"r{i}", state="PENDING", count=i) for i in range(5))
    with pytest.raises(StaleDataError, match="expected to update 5 row"), database.transaction() as s:
        rows = list(s.scalars(select(Row)))
        s.execute(text("DELETE FROM rows WHERE id = 'r3'"))
        for row in rows:
            row.state = "RUNNING"
    # Nothing of the failed transaction stayed.
    assert [state for _, state, _ in _rows(database)] == ["PENDING"] * 5


def test_rows_named_twice_go_to_executemany_and_the_later_wins(db: Any) -> None:
    database, ran = db
    with database.transaction() as s:
        s.add_all(Row(id=f"r{i}", state="PENDING", count=i) for i in range(3))
    ran.clear()
    with database.transaction() as s:
        s.connection().execute(
            update(Row).where(Row.id == bindparam("b_id")).values(state=bindparam("b_state")),
            [
                {"b_id": "r1", "b_state": "FIRST"},
                {"b_id": "r1", "b_state": "LATER"},
                {"b_id": "r2", "b_state": "ONCE"},
            ],
        )
    assert _writes(ran) == ["UPDATE"] * 3
    assert [state for _, state, _ in _rows(database)] == ["PENDING", "LATER", "ONCE"]


def test_more_rows_than_one_statement_takes_go_to_executemany(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    database, ran = db
    monkeypatch.setattr(sqlite_batches, "MAX_PARAMETERS", 20)
    with database.transaction() as s:
        s.add_all(Row(id=f"r{i:02}", state="PENDING", count=i) for i in range(10))  # 30 parameters
    assert _writes(ran) == ["INSERT"] * 10
    assert len(_rows(database)) == 10


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE rows SET count=(rows.count + ?) WHERE rows.id = ?",  # an expression, not a value
        "UPDATE rows SET state=? WHERE other.id = ?",  # a key of another table
        "UPDATE rows SET state=? WHERE rows.id = ? AND rows.count > ?",
        "INSERT INTO rows (id, state) VALUES (?, ?) ON CONFLICT DO NOTHING",
        "INSERT INTO rows (id, state) SELECT ?, ?",
        "DELETE FROM rows WHERE rows.id = ? AND rows.state = ?",
        "REPLACE INTO rows (id, state) VALUES (?, ?)",
    ],
)
def test_statements_of_other_shapes_are_left_as_they_are(statement: str) -> None:
    assert sqlite_batches.one_statement(statement, [("a", "b", 1), ("c", "d", 2)]) is None


def test_the_shapes_written_as_one_statement() -> None:
    rows = [("RUNNING", 1, "a"), ("ENDED", 2, "b")]
    assert sqlite_batches.one_statement("UPDATE rows SET state=?, count=? WHERE rows.id = ?", rows) == (
        "UPDATE rows SET state=batch.column1, count=batch.column2 "
        "FROM (VALUES (?, ?, ?), (?, ?, ?)) AS batch WHERE rows.id = batch.column3"
    )
    assert (
        sqlite_batches.one_statement("INSERT INTO rows (id, state, count) VALUES (?, ?, ?)", rows)
        == "INSERT INTO rows (id, state, count) VALUES (?, ?, ?), (?, ?, ?)"
    )
    assert (
        sqlite_batches.one_statement("DELETE FROM rows WHERE rows.id = ?", [("a",), ("b",)])
        == "DELETE FROM rows WHERE rows.id IN (?, ?)"
    )
