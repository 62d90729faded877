"""Many rows' INSERT, UPDATE or DELETE on SQLite go in a few statements of a few sizes
(store/sqlite_batches.py): the rows written are those executemany would write, the ORM still sees
a row that was not there, and statements of other shapes, or UPDATEs naming a row twice, go to
executemany as before."""

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


def test_a_flush_of_many_rows_is_a_few_statements_and_writes_what_executemany_would(db: Any) -> None:
    database, ran = db
    with database.transaction() as s:
        s.add_all(Row(id=f"r{i:03}", state="PENDING", count=i) for i in range(300))
    with database.transaction() as s:
        for row in s.scalars(select(Row).where(Row.count < 200)):
            row.state, row.count = "RUNNING", row.count + 1000
    with database.transaction() as s:
        for row in s.scalars(select(Row).where(Row.count >= 1100)):
            s.delete(row)
    # 300 rows INSERTed in statements of 256, 32, 8 and 4 rows; 200 UPDATEd in one (padded to
    # 256), 100 DELETEd in one (padded to 128): no row at a time.
    assert _writes(ran) == ["INSERT"] * 4 + ["UPDATE", "DELETE"]
    assert "FROM (VALUES" in next(statement for statement in ran if statement.startswith("UPDATE"))
    expected = [(f"r{i:03}", "RUNNING", i + 1000) for i in range(100)]
    expected += [(f"r{i:03}", "PENDING", i) for i in range(200, 300)]
    assert _rows(database) == expected


def test_a_row_that_is_gone_still_fails_the_flush(db: Any) -> None:
    database, ran = db
    with database.transaction() as s:
        s.add_all(Row(id=f"r{i}", state="PENDING", count=i) for i in range(5))
    with pytest.raises(StaleDataError, match="expected to update 5 row"), database.transaction() as s:
        rows = list(s.scalars(select(Row)))
        s.execute(text("DELETE FROM rows WHERE id = 'r3'"))
        for row in rows:
            row.state = "RUNNING"
    assert _writes(ran) == ["INSERT", "INSERT", "DELETE", "UPDATE"]  # 4 + 1 rows; the 5 in one
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


def test_many_rows_go_in_statements_of_a_few_sizes_and_count_as_one(db: Any) -> None:
    database, ran = db
    with database.transaction() as s:
        s.add_all(Row(id=f"r{i:03}", state="PENDING", count=i) for i in range(300))
    with database.transaction() as s:
        rows = list(s.scalars(select(Row)))
        s.execute(text("DELETE FROM rows WHERE id = 'r299'"))  # behind the ORM's back
        for row in rows[:298]:
            row.state = "RUNNING"
    assert _writes(ran) == ["INSERT"] * 4 + ["DELETE", "UPDATE", "UPDATE"]  # 256+32+8+4; 256+64
    with pytest.raises(StaleDataError, match="expected to update 299 row"), database.transaction() as s:
        rows = list(s.scalars(select(Row)))
        s.execute(text("DELETE FROM rows WHERE id = 'r000'"))
        for row in rows:
            row.state = "ENDED"
        s.flush()
    assert [r for r in _rows(database) if r[1] != "RUNNING"] == [("r298", "PENDING", 298)]


def test_the_sizes_of_statements() -> None:
    assert sqlite_batches.rows_per_statement(width=4, parameter_limit=32766) == 256
    assert sqlite_batches.rows_per_statement(width=40, parameter_limit=999) == 16
    assert sqlite_batches.rows_per_statement(width=999, parameter_limit=999) == 1
    rows = [(i,) for i in range(300)]
    padded = list(sqlite_batches.statement_rows(rows, 256, 1, pads=True))
    assert [len(chunk) for chunk in padded] == [256, 64]
    assert padded[1][44:] == [(None,)] * 20
    assert [len(chunk) for chunk in sqlite_batches.statement_rows(rows, 256, 1, pads=False)] == [
        256,
        32,
        8,
        4,
    ]
    assert [len(chunk) for chunk in sqlite_batches.statement_rows(rows[:3], 256, 1, pads=False)] == [2, 1]


def test_one_flush_after_another_reuses_a_few_statement_texts(db: Any) -> None:
    database, ran = db
    with database.transaction() as s:
        s.add_all(Row(id=f"r{i:03}", state="PENDING", count=i) for i in range(200))
    for size in range(2, 120):
        with database.transaction() as s:
            for row in s.scalars(select(Row).limit(size)):
                row.count += 1
    # SQLite's trace shows each statement with its values: count the rows of its VALUES.
    updates = {
        statement.split(" AS batch ")[0].count("), (") + 1
        for statement in ran
        if statement.startswith("UPDATE")
    }
    assert updates == {2, 4, 8, 16, 32, 64, 128}


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE rows SET count=(rows.count + ?) WHERE rows.id = ?",  # an expression, not a value
        "UPDATE rows SET state=?, count=? WHERE other.id = ?",  # a key of another table
        "UPDATE rows SET state=? WHERE rows.id = ? AND rows.count > ?",
        "UPDATE rows SET state=?, id=? WHERE rows.id = ?",  # a key set: rows would chain
        "INSERT INTO rows (id, state) VALUES (?, ?) ON CONFLICT DO NOTHING",
        "INSERT INTO rows (id, state) SELECT ?, ?",
        "DELETE FROM rows WHERE rows.id = ? AND rows.state = ?",
        "REPLACE INTO rows (id, state) VALUES (?, ?)",
    ],
)
def test_statements_of_other_shapes_are_left_as_they_are(statement: str) -> None:
    assert sqlite_batches.shape_of(statement, 3) is None


def test_the_shapes_written_together() -> None:
    update = sqlite_batches.shape_of("UPDATE rows SET state=?, count=? WHERE rows.id = ?", 3)
    assert update is not None
    assert update.text(2) == (
        "UPDATE rows SET state=batch.column1, count=batch.column2 "
        "FROM (VALUES (?, ?, ?), (?, ?, ?)) AS batch WHERE rows.id = batch.column3"
    )
    insert = sqlite_batches.shape_of("INSERT INTO rows (id, state, count) VALUES (?, ?, ?)", 3)
    assert insert is not None
    assert insert.text(2) == "INSERT INTO rows (id, state, count) VALUES (?, ?, ?), (?, ?, ?)"
    delete = sqlite_batches.shape_of("DELETE FROM rows WHERE rows.id = ?", 1)
    assert delete is not None
    assert delete.text(2) == "DELETE FROM rows WHERE rows.id IN (?, ?)"
