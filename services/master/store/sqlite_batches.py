"""Many rows' INSERT, UPDATE or DELETE on SQLite as one statement, not one step a row.

Python's sqlite3 lets the GIL go around every statement it steps, and `executemany` steps once
per row. The master's writer holds its process-wide lock while it flushes, and every hand-back of
the GIL may wait for another thread's turn (the agents' streams' loop, the scheduling thread):
with one busy Python thread beside it, an executemany of 256 UPDATEs took 390-520 ms instead of
0.2-1.3 ms, and the same rows as one UPDATE ... FROM (VALUES ...) 6.7 ms (bench/README.md, "One
statement for a flush's rows on SQLite"). A flush of a batch of agents' reports UPDATEs hundreds
of allocations, containers, trials and tasks that way, so the lock was held for the waits.

The ORM's executemany statements have three plain shapes, and those are written as one statement:

    UPDATE t SET a=?, b=? WHERE t.k = ?   ->  UPDATE t SET a=batch.column1, b=batch.column2
                                              FROM (VALUES (?, ?, ?), ...) AS batch
                                              WHERE t.k = batch.column3
    INSERT INTO t (a, b) VALUES (?, ?)    ->  INSERT INTO t (a, b) VALUES (?, ?), (?, ?), ...
    DELETE FROM t WHERE t.k = ?           ->  DELETE FROM t WHERE t.k IN (?, ?, ...)

The result is the same rows written, in one step, with the row count executemany would give (the
ORM compares it with the rows it meant to write). Anything else goes to executemany as before: a
statement of another shape, UPDATEs naming one row twice (executemany writes the later over the
earlier; one UPDATE ... FROM would pick either), and more rows than fit one statement's
parameters (the count of a second statement could not be added to the cursor's).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, event

# SQLite's limit on a statement's parameters (SQLITE_MAX_VARIABLE_NUMBER, 32766 since 3.32);
# kept below it.
MAX_PARAMETERS = 32_000
# UPDATE ... FROM came with SQLite 3.33.
_UPDATE_FROM_SINCE = (3, 33, 0)

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_UPDATE = re.compile(
    rf"UPDATE (?P<table>{_NAME}) SET (?P<sets>{_NAME}=\?(?:, {_NAME}=\?)*) "
    rf"WHERE (?P<keys>{_NAME}\.{_NAME} = \?(?: AND {_NAME}\.{_NAME} = \?)*)"
)
_INSERT = re.compile(
    rf"INSERT INTO (?P<table>{_NAME}) \((?P<columns>{_NAME}(?:, {_NAME})*)\) "
    rf"VALUES \((?P<marks>\?(?:, \?)*)\)"
)
_DELETE = re.compile(rf"DELETE FROM (?P<table>{_NAME}) WHERE (?P<key>(?P=table)\.{_NAME}) = \?")


def install(engine: Engine) -> None:
    """Write the engine's executemany statements of the shapes above as one statement each."""
    if sqlite3.sqlite_version_info < _UPDATE_FROM_SINCE:
        return
    event.listen(engine, "do_executemany", _as_one_statement)


def _as_one_statement(cursor: Any, statement: str, parameters: Sequence[Any], _context: Any) -> bool:
    """True when the rows were written by one statement; False leaves them to executemany."""
    if len(parameters) < 2 or not all(isinstance(row, (tuple, list)) for row in parameters):
        return False
    width = len(parameters[0])
    if width == 0 or width * len(parameters) > MAX_PARAMETERS or any(len(row) != width for row in parameters):
        return False
    rewritten = one_statement(statement, parameters)
    if rewritten is None:
        return False
    cursor.execute(rewritten, [value for row in parameters for value in row])
    return True


def one_statement(statement: str, parameters: Sequence[Sequence[Any]]) -> str | None:
    """The one statement that writes every row of `parameters` as `statement` executed once per
    row would; None for a statement of another shape or rows it cannot take together."""
    rows = len(parameters)
    width = len(parameters[0])
    update = _UPDATE.fullmatch(statement)
    if update is not None:
        return _update(update, parameters, width)
    insert = _INSERT.fullmatch(statement)
    if insert is not None:
        marks = "(" + insert["marks"] + ")"
        return f"INSERT INTO {insert['table']} ({insert['columns']}) VALUES " + ", ".join([marks] * rows)
    delete = _DELETE.fullmatch(statement)
    if delete is not None and width == 1:
        return f"DELETE FROM {delete['table']} WHERE {delete['key']} IN (" + ", ".join(["?"] * rows) + ")"
    return None


def _update(match: re.Match[str], parameters: Sequence[Sequence[Any]], width: int) -> str | None:
    table = match["table"]
    columns = [item[: -len("=?")] for item in match["sets"].split(", ")]
    keys = [item[: -len(" = ?")] for item in match["keys"].split(" AND ")]
    if len(columns) + len(keys) != width or any(not key.startswith(table + ".") for key in keys):
        return None
    # executemany writes a row named twice twice, the later last; UPDATE ... FROM would write it
    # once, from either.
    named = {tuple(row[len(columns) :]) for row in parameters}
    if len(named) != len(parameters):
        return None
    # A VALUES subquery's columns are column1, column2, ... (no WITH: Python's sqlite3 gives a
    # row count only for a statement that starts with its verb).
    names = [f"column{i + 1}" for i in range(width)]
    row_marks = "(" + ", ".join(["?"] * width) + ")"
    sets = ", ".join(f"{column}=batch.{name}" for column, name in zip(columns, names, strict=False))
    matches = " AND ".join(
        f"{key} = batch.{name}" for key, name in zip(keys, names[len(columns) :], strict=True)
    )
    return (
        f"UPDATE {table} SET {sets} FROM (VALUES {', '.join([row_marks] * len(parameters))}) AS batch "
        f"WHERE {matches}"
    )
