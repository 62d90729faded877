"""A Core select compiled once per database dialect and run on a connection's own DBAPI cursor.

For a hot read of a few dozen small rows, SQLAlchemy's execution layer (the session, the
statement cache lookup, the Result and its Row objects) cost more than the query itself: a
trial's twenty validation reports took 0.47 ms through `Session.execute`, 0.22 ms on the cursor,
and a Session made and closed around it 0.05 ms more than a bare connection. What SQLAlchemy's
layer adds that a read needs is kept: the dialect's SQL and parameter style, and each column
type's result processing (SQLite's dates and booleans come back as text and integers); the rest
(the Session, ORM, events, Row objects) is what a hot read skips. Reads only: the statement runs
on the given connection, in its transaction if it has one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Connection, Select
from sqlalchemy.engine import Dialect

Processor = Callable[[Any], Any] | None
# Any select: its row type does not matter here (rows come back as plain tuples).
AnySelect = Select[*tuple[Any, ...]]


class _Compiled:
    def __init__(self, statement: AnySelect, dialect: Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql = str(compiled)
        # Positional parameter styles (SQLite's "?") take the values in the statement's order.
        self.order: tuple[str, ...] | None = (
            tuple(compiled.positiontup or ()) if compiled.positional else None
        )
        processors: list[Processor] = [
            column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in statement.selected_columns
        ]
        self.processors = processors if any(processors) else None


class PreparedSelect:
    """`rows(connection, **params)`: the statement's rows as plain tuples, in its column order
    (`Database.read_connection()` gives a connection without the cost of a Session)."""

    def __init__(self, statement: AnySelect) -> None:
        self._statement = statement
        self._compiled: dict[str, _Compiled] = {}

    def _for(self, dialect: Dialect) -> _Compiled:
        found = self._compiled.get(dialect.name)
        if found is None:
            found = self._compiled[dialect.name] = _Compiled(self._statement, dialect)
        return found

    def rows(self, connection: Connection, **params: Any) -> list[tuple[Any, ...]]:
        compiled = self._for(connection.dialect)
        args: tuple[Any, ...] | Mapping[str, Any] = (
            params if compiled.order is None else tuple(params[name] for name in compiled.order)
        )
        dbapi_connection = connection.connection
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(compiled.sql, args)
            rows: list[tuple[Any, ...]] = list(cursor.fetchall())
        except connection.dialect.loaded_dbapi.Error as exc:
            # What SQLAlchemy's layer would do: a lost connection goes, not back into the pool.
            if connection.dialect.is_disconnect(exc, dbapi_connection.dbapi_connection, cursor):
                connection.invalidate(exc)
            raise
        finally:
            with contextlib.suppress(connection.dialect.loaded_dbapi.Error):
                cursor.close()  # on a lost connection this fails too; the first error is raised
        processors = compiled.processors
        if processors is None:
            return rows
        return [
            tuple(
                value if fn is None or value is None else fn(value)
                for fn, value in zip(processors, row, strict=True)
            )
            for row in rows
        ]
