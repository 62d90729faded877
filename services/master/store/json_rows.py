"""Many rows sent to PostgreSQL as one JSON document, taken apart by the server (json_to_recordset).

psycopg2 renders every parameter into the statement's text on the client before it sends it, in
C but holding the GIL, about a microsecond a value; the server then parses every literal. A
search's hundred new trials, their tasks and their allocation requests are three INSERTs of about
2,000 values each: 2 ms of the master's CPU and 4 ms of wall each, under the master's lock
(bench/README.md, "Rows as one JSON parameter"). As one JSON document (orjson, in C) the same rows
cost 0.15 ms of CPU and 0.9 ms of wall.

What the ordinary INSERT does for its values is done here too, so a row stores the same either
way: each column's Python-side default for a column the rows leave out, a type's own bind
processing (UtcDateTime's check and conversion), a JSON column's value encoded by its own type
(the same text, None as JSON null) and cast back from text in the server. What JSON cannot carry
as psycopg2 would (a non-finite float, a float for an integer column, bytes) goes the ordinary
way. The statement stays an ORM INSERT on the model's table, so the
session's listeners see it as they see the ordinary one; the ids of its rows, which they would
have read from the parameters, are in the execution option INSERTED_IDS."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import JSON, Executable, Integer, Text, bindparam, cast, func, insert, select
from sqlalchemy import column as sql_column
from sqlalchemy.orm import Session
from sqlalchemy.types import Float, TypeDecorator

# The execution option that carries the inserted rows' `id`s (a list in the rows' order), for a
# listener that would read them from an ordinary INSERT's parameters.
INSERTED_IDS = "cairn.inserted_ids"

# Fewer rows than this go as an ordinary INSERT: the JSON's parse in the server costs more than
# rendering a few values.
MIN_ROWS = 8

_ROWS = "rows"
# Each row's place in the document, carried in it.
_ORDER = "json_rows_order"

# How many statements and rows went as JSON documents (for tests and probes).
SENT = {"statements": 0, "rows": 0}


def prepared(
    session: Session, model: type[Any], rows: Sequence[dict[str, Any]]
) -> tuple[Any, dict[str, str]] | None:
    """`rows`' INSERT into `model`'s table as one JSON document and its parameters (`statement`),
    or None where they go the ordinary way (`applies`, or a value JSON does not carry)."""
    if not applies(session, rows):
        return None
    try:
        return statement(session, model, rows)
    except TypeError:
        return None


def applies(session: Session, rows: Sequence[dict[str, Any]]) -> bool:
    """Whether `rows` go as one JSON document: on PostgreSQL, enough of them, all with the same
    columns (an ordinary INSERT of many rows asks the same)."""
    if len(rows) < MIN_ROWS or session.get_bind().dialect.name != "postgresql":
        return False
    names = rows[0].keys()
    return all(row.keys() == names for row in rows)


def statement(
    session: Session, model: type[Any], rows: Sequence[dict[str, Any]]
) -> tuple[Any, dict[str, str]]:
    """The ORM INSERT ... SELECT FROM json_to_recordset(:rows) of `rows` into `model`'s table, and
    its parameters. Raises TypeError for rows it does not take (a key that is not a column, a SQL
    expression default) and for a value JSON cannot carry as psycopg2 would (orjson's error, a
    non-finite float, a float for an integer column): the caller then inserts them the ordinary
    way."""
    table = model.__table__
    given = tuple(rows[0])
    dialect = session.get_bind().dialect
    plan = _plan(table, given, dialect)
    if not carried_alike(rows, plan.floats, plan.integers):
        raise TypeError("a number JSON does not carry as psycopg2 would")
    document = [_json_row(plan, row, n) for n, row in enumerate(rows)]
    stmt = plan.statement(model)
    if "id" in given:
        stmt = stmt.execution_options(**{INSERTED_IDS: [row["id"] for row in rows]})
    encoded = orjson.dumps(document).decode()
    SENT["statements"] += 1
    SENT["rows"] += len(rows)
    return stmt, {_ROWS: encoded}


class _Plan:
    """For one table and one set of given columns: which defaults to add, which values to bind
    through their type, and the statement's shape (built once; each call binds its own
    document)."""

    def __init__(self, table: Any, given: tuple[str, ...], dialect: Any) -> None:
        self.dialect = dialect
        unknown = [name for name in given if name not in table.c]
        if unknown:
            raise TypeError(f"{table.name}: not columns: {unknown}")  # an attribute's name, say
        self.defaults: list[tuple[str, Any]] = []
        for col in table.columns:
            if col.name in given or col.default is None:
                continue
            if not (col.default.is_scalar or col.default.is_callable):
                raise TypeError(f"{table.name}.{col.name}: a SQL expression default")
            self.defaults.append((col.name, col.default))
        self.names = given + tuple(name for name, _ in self.defaults)
        types = {name: table.c[name].type for name in self.names}
        # The given numbers carried_alike looks at (a default is a value of its column's type).
        self.floats = [name for name in given if isinstance(types[name], Float)]
        self.integers = [name for name in given if isinstance(types[name], Integer)]
        self.binders = {name: kind for name, kind in types.items() if isinstance(kind, TypeDecorator)}
        # A JSON column's value encoded by its own type (its serializer, None as JSON null), as
        # the ordinary INSERT sends it: carried as text, cast back, stored as the same text.
        self.json_encoders = {
            name: kind.bind_processor(dialect) for name, kind in types.items() if isinstance(kind, JSON)
        }
        record = (
            func.json_to_recordset(bindparam(_ROWS, type_=Text))
            .table_valued(
                *(
                    sql_column(name, Text if name in self.json_encoders else kind)
                    for name, kind in types.items()
                ),
                sql_column(_ORDER, Integer),
            )
            .render_derived(name="r", with_types=True)
        )
        selected = [
            cast(record.c[name], kind) if name in self.json_encoders else record.c[name]
            for name, kind in types.items()
        ]
        # In the document's order, as a many-row VALUES inserts them: a serial id numbers them so.
        self._select = select(*selected).order_by(record.c[_ORDER])
        self._columns = [table.c[name] for name in self.names]
        self._statements: dict[type[Any], Executable] = {}

    def statement(self, model: type[Any]) -> Any:
        made = self._statements.get(model)
        if made is None:
            made = insert(model).from_select(self._columns, self._select, include_defaults=False)
            # An ORM INSERT given parameters is taken for a bulk insert of them as rows: this one's
            # parameter is the document, bound in the statement's SELECT.
            made = made.execution_options(dml_strategy="orm")
            self._statements[model] = made
        return made


def carried_alike(rows: Sequence[dict[str, Any]], floats: Sequence[str], integers: Sequence[str]) -> bool:
    """Whether JSON carries the rows' numbers as psycopg2's literals would: JSON has no NaN or
    infinity (orjson writes null), and an integer column's parser refuses the "2.0" a float
    becomes, where PostgreSQL rounds a literal 2.0. `floats`, `integers`: the keys of float and
    integer columns."""
    for name in floats:
        for row in rows:
            value = row[name]
            if isinstance(value, float) and not math.isfinite(value):
                return False
    return not any(isinstance(row[name], float) for name in integers for row in rows)


def _json_row(plan: _Plan, row: dict[str, Any], order: int) -> dict[str, Any]:
    out = dict(row)
    out[_ORDER] = order
    for name, default in plan.defaults:
        out[name] = default.arg if default.is_scalar else default.arg(None)
    for name, decorated in plan.binders.items():
        out[name] = decorated.process_bind_param(out[name], plan.dialect)
    for name, encode in plan.json_encoders.items():
        if encode is not None:
            out[name] = encode(out[name])
    return out


_plans: dict[tuple[str, str, tuple[str, ...]], _Plan] = {}
_plans_lock = threading.Lock()


def _plan(table: Any, given: tuple[str, ...], dialect: Any) -> _Plan:
    key = (dialect.name, table.name, given)
    plan = _plans.get(key)
    if plan is None:
        with _plans_lock:
            plan = _plans.get(key) or _Plan(table, given, dialect)
            _plans[key] = plan
    return plan
