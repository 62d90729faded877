"""Many rows sent to PostgreSQL as one JSON document, taken apart by the server (json_to_recordset).

psycopg2 renders every parameter into the statement's text on the client before it sends it, in
C but holding the GIL, about a microsecond a value; the server then parses every literal. A
search's hundred new trials, their tasks and their allocation requests are three INSERTs of about
2,000 values each: 2 ms of the master's CPU and 4 ms of wall each, under the master's lock
(bench/README.md, "Rows as one JSON parameter"). As one JSON document (orjson, in C) the same rows
cost 0.15 ms of CPU and 0.9 ms of wall.

What the ordinary INSERT does for its values is done here too, so a row stores the same either
way: each column's Python-side default for a column the rows leave out, a type's own bind
processing (UtcDateTime's check and conversion), JSON columns' None stored as JSON null (SQLAlchemy
JSON's none_as_null=False). The statement stays an ORM INSERT on the model's table, so the
session's listeners see it as they see the ordinary one; the ids of its rows, which they would
have read from the parameters, are in the execution option INSERTED_IDS."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import (
    JSON,
    Column,
    ColumnElement,
    Executable,
    Integer,
    Text,
    bindparam,
    func,
    insert,
    literal_column,
    select,
)
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
    its parameters. Raises TypeError (orjson's error, or a float JSON has no form for) for a value
    JSON cannot carry: the caller then inserts them the ordinary way."""
    table = model.__table__
    given = tuple(rows[0])
    plan = _plan(table, given)
    dialect = session.get_bind().dialect
    document = [_json_row(plan, row, dialect, n) for n, row in enumerate(rows)]
    stmt = plan.statement(model)
    if "id" in given:
        stmt = stmt.execution_options(**{INSERTED_IDS: [row["id"] for row in rows]})
    return stmt, {_ROWS: orjson.dumps(document).decode()}


class _Plan:
    """For one table and one set of given columns: which defaults to add, which values to bind
    through their type, and the statement's shape (built once; each call binds its own
    document)."""

    def __init__(self, table: Any, given: tuple[str, ...]) -> None:
        self.defaults: list[tuple[str, Any]] = []
        for col in table.columns:
            if col.name in given or col.default is None:
                continue
            if not (col.default.is_scalar or col.default.is_callable):
                raise TypeError(f"{table.name}.{col.name}: a SQL expression default")
            self.defaults.append((col.name, col.default))
        self.names = given + tuple(name for name, _ in self.defaults)
        # JSON has no NaN or infinity (orjson writes null); psycopg2 sends them as floats.
        self.floats = [name for name in self.names if isinstance(table.c[name].type, Float)]
        self.binders = {
            name: table.c[name].type for name in self.names if isinstance(table.c[name].type, TypeDecorator)
        }
        record = (
            func.json_to_recordset(bindparam(_ROWS, type_=Text))
            .table_valued(
                *(sql_column(name, table.c[name].type) for name in self.names), sql_column(_ORDER, Integer)
            )
            .render_derived(name="r", with_types=True)
        )
        selected = [_selected(table.c[name], record.c[name]) for name in self.names]
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


def _selected(col: Column[Any], value: ColumnElement[Any]) -> ColumnElement[Any]:
    # A JSON value null arrives as SQL NULL; the ordinary INSERT stores Python's None as JSON null.
    if isinstance(col.type, JSON) and not col.type.none_as_null:
        return func.coalesce(value, literal_column("'null'::json"))
    return value


def _json_row(plan: _Plan, row: dict[str, Any], dialect: Any, order: int) -> dict[str, Any]:
    out = dict(row)
    out[_ORDER] = order
    for name in plan.floats:
        value = out.get(name)
        if value is not None and not math.isfinite(value):
            raise TypeError(f"{name}: {value} has no JSON form")
    for name, default in plan.defaults:
        out[name] = default.arg if default.is_scalar else default.arg(None)
    for name, decorated in plan.binders.items():
        out[name] = decorated.process_bind_param(out[name], dialect)
    return out


_plans: dict[tuple[str, tuple[str, ...]], _Plan] = {}
_plans_lock = threading.Lock()


def _plan(table: Any, given: tuple[str, ...]) -> _Plan:
    key = (table.name, given)
    plan = _plans.get(key)
    if plan is None:
        with _plans_lock:
            plan = _plans.get(key) or _Plan(table, given)
            _plans[key] = plan
    return plan
