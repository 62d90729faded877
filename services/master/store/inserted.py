"""Many new rows in one INSERT, as rows (`insert_rows`) or handed back as the session's objects
(`insert_returning`); on PostgreSQL as one JSON document (json_rows.py says why).

The unit of work's own insert of new objects wants their generated ids back in the order it sent
them, which SQLite does not promise for a multi-row INSERT ... RETURNING against a ROWID key, so
there SQLAlchemy inserts one statement a row (100 statements for a grid of 100 trials). And for
rows whose keys are known, building each as an object for the flush costs more than the insert.
Here the returned rows are asked for unordered and matched back to the parameters by a key unique
among them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from sqlalchemy import insert
from sqlalchemy.orm import Session

from services.master.store import json_rows

M = TypeVar("M")


def insert_rows(session: Session, model: type[Any], rows: Sequence[dict[str, Any]]) -> None:
    """`rows` (each a dict of the same columns) inserted into `model`'s table in one statement."""
    as_json = json_rows.prepared(session, model, rows)
    if as_json is not None:
        session.execute(*as_json)
    else:
        session.execute(insert(model), rows)


def insert_returning(session: Session, model: type[M], rows: Sequence[dict[str, Any]], key: str) -> list[M]:
    """`rows` inserted in one statement; their objects (persistent in `session`, as a flush leaves
    them) in the order of `rows`, matched by the attribute and column `key`, unique among them."""
    as_json = json_rows.prepared(session, model, rows)
    if as_json is not None:
        stmt, params = as_json
        made = session.scalars(stmt.returning(model), params)
    else:
        made = session.scalars(insert(model).returning(model), rows)
    by_key = {getattr(obj, key): obj for obj in made}
    return [by_key[row[key]] for row in rows]
