"""Many rows' INSERT, UPDATE or DELETE on SQLite in a few statements, not one step a row.

Python's sqlite3 lets the GIL go around every statement it steps, and `executemany` steps once
per row. The master's writer holds its process-wide lock while it flushes, and every hand-back of
the GIL may wait for another thread's turn: beside one thread that runs Python without a pause,
an ORM flush of 256 UPDATEs took ~600 ms instead of ~4 ms, and the same rows as one UPDATE ...
FROM (VALUES ...) ~20 ms (`bench.sqlite_flush_beside_a_busy_thread`). A flush of a batch of
agents' reports UPDATEs hundreds of allocations, containers, trials and tasks that way.

The ORM's executemany statements have three plain shapes, and those are written together:

    UPDATE t SET a=?, b=? WHERE t.k = ?   ->  UPDATE t SET a=batch.column1, b=batch.column2
                                              FROM (VALUES (?, ?, ?), ...) AS batch
                                              WHERE t.k = batch.column3
    INSERT INTO t (a, b) VALUES (?, ?)    ->  INSERT INTO t (a, b) VALUES (?, ?), (?, ?), ...
    DELETE FROM t WHERE t.k = ?           ->  DELETE FROM t WHERE t.k IN (?, ?, ...)

in statements of 1, 2, 4, ... up to MAX_ROWS rows (Shape says how the last is filled), so that a
connection's cache of prepared statements holds a few small texts per shape, not one per count
of rows. The same rows are written, with the row count executemany would give (the ORM compares
it with the rows it meant to write). Anything else goes to executemany as before: a statement of
another shape, UPDATEs naming one row twice (executemany writes the later over the earlier;
one UPDATE ... FROM would write either), and UPDATEs that set a key column.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import Engine, event

# Rows a statement takes at most. Python's sqlite3 keeps each connection's last 128 statements
# prepared, by their text, and a statement of many rows is big (a 9-column INSERT of 1,000 rows
# ~0.9 MiB): the texts are few and small (1, 2, 4, ... up to this many rows), and more rows go in
# statements of this size.
MAX_ROWS = 256
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


class Shape:
    """How an executemany statement's rows are written together: `text(n)` is the statement for
    n rows. An UPDATE's or DELETE's last statement is padded to a size of the few with rows whose
    key is NULL (`k = NULL` and `k IN (NULL)` match nothing); an INSERT's rows cannot be padded,
    so its rest goes in statements of those sizes."""

    def __init__(self, text: Callable[[int], str], keys_from: int | None, pads: bool) -> None:
        self.text = functools.lru_cache(maxsize=16)(text)
        # Where an UPDATE's row names its row (after the SET values): the rows must name
        # different rows. None: any rows (a DELETE's rows named twice delete it once either way).
        self.keys_from = keys_from
        self.pads = pads


def install(engine: Engine) -> None:
    """Write the engine's executemany statements of the shapes above as few statements."""
    if sqlite3.sqlite_version_info < _UPDATE_FROM_SINCE:
        return
    event.listen(engine, "do_executemany", in_few_statements)


def in_few_statements(cursor: Any, statement: str, parameters: Sequence[Any], context: Any) -> bool:
    """True when the rows were written here; False leaves them to executemany."""
    if len(parameters) < 2 or not all(isinstance(row, (tuple, list)) for row in parameters):
        return False
    width = len(parameters[0])
    if width == 0 or any(len(row) != width for row in parameters):
        return False
    shape = shape_of(statement, width)
    if shape is None:
        return False
    most = rows_per_statement(width, cursor.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
    if most < 2:
        return False
    if shape.keys_from is not None:
        # executemany writes a row named twice twice, the later last; UPDATE ... FROM would write
        # it once, from either row.
        try:
            named = {tuple(row[shape.keys_from :]) for row in parameters}
        except TypeError:  # a key value that cannot be compared here (an unhashable adapter)
            return False
        if len(named) != len(parameters):
            return False
    changed = 0
    for rows in statement_rows(parameters, most, width, shape.pads):
        cursor.execute(shape.text(len(rows)), [value for row in rows for value in row])
        changed += cursor.rowcount
    # What executemany's cursor would count: the rows of every statement. SQLAlchemy takes an
    # execution's row count from here when it is set (as its own insertmanyvalues does); the ORM
    # compares it with the rows it meant to write.
    context._rowcount = changed
    return True


def rows_per_statement(width: int, parameter_limit: int) -> int:
    """The most rows of `width` values one statement takes: a power of two, at most MAX_ROWS."""
    most = 1
    while most * 2 <= MAX_ROWS and most * 2 * width <= parameter_limit:
        most *= 2
    return most


def statement_rows(
    parameters: Sequence[Sequence[Any]], most: int, width: int, pads: bool
) -> Iterator[Sequence[Sequence[Any]]]:
    """The rows of each statement, each statement of 1, 2, 4, ... or `most` rows."""
    done = 0
    while len(parameters) - done >= most:
        yield parameters[done : done + most]
        done += most
    rest = len(parameters) - done
    if rest == 0:
        return
    if pads:
        size = 1
        while size < rest:
            size *= 2
        yield [*parameters[done:], *[(None,) * width] * (size - rest)]
        return
    size = most
    while done < len(parameters):
        while size > len(parameters) - done:
            size //= 2
        yield parameters[done : done + size]
        done += size


@functools.lru_cache(maxsize=256)
def shape_of(statement: str, width: int) -> Shape | None:
    """How `statement`'s rows of `width` values are written together; None for a statement of
    another shape."""
    update = _UPDATE.fullmatch(statement)
    if update is not None:
        return _update_shape(update, width)
    insert = _INSERT.fullmatch(statement)
    if insert is not None:
        head = f"INSERT INTO {insert['table']} ({insert['columns']}) VALUES "
        marks = "(" + insert["marks"] + ")"
        return Shape(lambda n: head + ", ".join([marks] * n), keys_from=None, pads=False)
    delete = _DELETE.fullmatch(statement)
    if delete is not None and width == 1:
        head = f"DELETE FROM {delete['table']} WHERE {delete['key']} IN ("
        return Shape(lambda n: head + ", ".join(["?"] * n) + ")", keys_from=None, pads=True)
    return None


def _update_shape(match: re.Match[str], width: int) -> Shape | None:
    table = match["table"]
    columns = [item[: -len("=?")] for item in match["sets"].split(", ")]
    keys = [item[: -len(" = ?")] for item in match["keys"].split(" AND ")]
    if len(columns) + len(keys) != width or any(not key.startswith(table + ".") for key in keys):
        return None
    # A row that sets a key column may make a later row's key match (executemany applies them in
    # turn; one UPDATE ... FROM matches every row against the table as it was).
    if {key.split(".", 1)[1] for key in keys} & set(columns):
        return None
    # A VALUES subquery's columns are column1, column2, ... (no WITH: Python's sqlite3 gives a
    # row count only for a statement that starts with its verb).
    names = [f"column{i + 1}" for i in range(width)]
    sets = ", ".join(f"{column}=batch.{name}" for column, name in zip(columns, names, strict=False))
    matches = " AND ".join(
        f"{key} = batch.{name}" for key, name in zip(keys, names[len(columns) :], strict=True)
    )
    row_marks = "(" + ", ".join(["?"] * width) + ")"

    def text(n: int) -> str:
        return (
            f"UPDATE {table} SET {sets} FROM (VALUES {', '.join([row_marks] * n)}) AS batch WHERE {matches}"
        )

    return Shape(text, keys_from=len(columns), pads=True)
