"""An executemany of a by-key UPDATE on PostgreSQL sent as one statement over a JSON document.

A unit of work's flush updates many rows of a table with one statement and a parameter set per row
(a batch of agents' reports: 256 containers, their allocations, trials and tasks). psycopg2's
execute_batch renders every row's values into the text of one statement each on the client,
holding the GIL and the master's lock: it was a ninth of the agents' batches' GIL samples at
500 starts a second (bench/README.md, "Rows as one JSON parameter"). Here the rows go as one JSON
document instead, joined to the table by its key in the server:

    UPDATE t SET a = r.a, b = CAST(r.b AS JSON)
    FROM (SELECT r.* FROM ROWS FROM (json_to_recordset(%(rows)s) AS (...)) WITH ORDINALITY AS r
          JOIN t AS locked ON locked.id = r.k ORDER BY r.ordinality FOR NO KEY UPDATE OF locked) AS r
    WHERE t.id = r.k

The rows are locked first, in the document's order, which is the order the flush sorted them in
(by key) and execute_batch updated them in: other writers take the same rows' locks in key order
(the log writer's acked seqs, metrics/logs.py), and a join left to itself takes them in whatever
order its plan visits them, a deadlock waiting to happen. FOR NO KEY UPDATE is the lock an
UPDATE of non-key columns takes, so it blocks no more than the statement itself would.

Only the plain shape is taken (`UPDATE t SET c = %(p)s, ... WHERE t.key = %(k)s`, as the ORM's
flush writes it, each parameter once, the key not among the columns set); anything else, rows that
name a key twice (applied one after another, the last one wins; a join would pick one), values JSON
cannot carry as psycopg2 would (bytes, non-finite floats; a float for an integer column, which
PostgreSQL rounds from a literal but refuses from JSON), or fewer rows than MIN_ROWS, goes through
psycopg2 as before. Values reach here already
through their types' bind processing (a JSON column's as its text, cast back in the statement).
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from sqlalchemy import Engine, event
from sqlalchemy.sql.sqltypes import Float, Integer

from services.master.store import json_rows

MIN_ROWS = 8
# The statements' shapes are the ORM's few: a bound on what is kept, whatever comes.
MAX_PLANS = 1000

_UPDATE = re.compile(r"UPDATE (\w+) SET (.+) WHERE (\w+)\.(\w+) = %\((\w+)\)s", re.DOTALL)
_ASSIGNMENT = re.compile(r"(\w+)=%\((\w+)\)s(::JSONB?)?")
_ROWS = "json_updates_rows"
# The statement's own names: the rows, their place in the document, the table's rows they lock.
_R = "json_updates_r"
_ORDER = "json_updates_order"
_LOCKED = "json_updates_locked"

# How many statements and rows went as JSON documents (for tests and probes).
SENT = {"statements": 0, "rows": 0}

# Per statement text: its rewrite, or None where it does not apply.
_plans: dict[str, _Plan | None] = {}


class _Plan:
    def __init__(self, sql: str, key: str, floats: list[str], integers: list[str]) -> None:
        self.sql = sql
        self.key = key  # the parameter that names each row
        self.floats = floats  # the parameters of float columns
        self.integers = integers  # the parameters of integer columns


def install(engine: Engine) -> None:
    """Send the engine's qualifying executemany UPDATEs as one statement (a PostgreSQL engine)."""
    event.listen(engine, "do_executemany", _do_executemany)


def _do_executemany(cursor: Any, statement: str, parameters: Any, context: Any) -> bool | None:
    if len(parameters) < MIN_ROWS or not statement.startswith("UPDATE "):
        return None
    if statement in _plans:
        plan = _plans[statement]
    else:
        plan = _plan(statement, context)
        if len(_plans) < MAX_PLANS:
            _plans[statement] = plan
    if plan is None:
        return None
    rows = [row for row in parameters if isinstance(row, dict)]
    if len(rows) != len(parameters):
        return None
    if len({row[plan.key] for row in rows}) != len(rows):
        return None  # one row updated twice: in order, as psycopg2 would
    if not json_rows.carried_alike(rows, plan.floats, plan.integers):
        return None
    try:
        # The parameters' names are str subclasses (SQLAlchemy's quoted_name), which orjson takes
        # as keys only when told.
        document = orjson.dumps(rows, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return None  # bytes, or a value orjson does not know
    cursor.execute(plan.sql, {_ROWS: document.decode()})
    SENT["statements"] += 1
    SENT["rows"] += len(rows)
    return True


def _plan(statement: str, context: Any) -> _Plan | None:
    match = _UPDATE.fullmatch(statement.strip())
    compiled = getattr(context, "compiled", None)
    table = getattr(getattr(compiled, "statement", None), "table", None)
    if match is None or table is None or match.group(1) != table.name or match.group(3) != table.name:
        return None
    name, assignments, _, key_column, key = match.groups()
    columns = table.columns
    dialect = context.dialect
    sets: list[str] = []
    record: list[str] = []
    params: list[str] = []
    floats: list[str] = []
    integers: list[str] = []
    for item in assignments.split(", "):
        assigned = _ASSIGNMENT.fullmatch(item)
        if assigned is None:
            return None
        column, param, cast = assigned.groups()
        if column not in columns or column == key_column or param == key or param in params:
            return None
        params.append(param)
        if cast:  # a JSON value, already its text: carried as text, cast back
            record.append(f'"{param}" TEXT')
            sets.append(f'{column} = CAST({_R}."{param}" AS {cast[2:]})')
        else:
            record.append(f'"{param}" {columns[column].type.compile(dialect)}')
            sets.append(f'{column} = {_R}."{param}"')
        if isinstance(columns[column].type, Float):
            floats.append(param)
        elif isinstance(columns[column].type, Integer):
            integers.append(param)
    if key_column not in columns:
        return None
    if isinstance(columns[key_column].type, Integer):
        integers.append(key)
    record.append(f'"{key}" {columns[key_column].type.compile(dialect)}')
    names = ", ".join(f'"{param}"' for param in [*params, key])
    sql = (
        f"UPDATE {name} SET {', '.join(sets)} "
        f"FROM (SELECT {_R}.* FROM ROWS FROM (json_to_recordset(%({_ROWS})s) AS ({', '.join(record)})) "
        f"WITH ORDINALITY AS {_R}({names}, {_ORDER}) "
        f'JOIN {name} AS {_LOCKED} ON {_LOCKED}.{key_column} = {_R}."{key}" '
        f"ORDER BY {_R}.{_ORDER} FOR NO KEY UPDATE OF {_LOCKED}) AS {_R} "
        f'WHERE {name}.{key_column} = {_R}."{key}"'
    )
    return _Plan(sql, key, floats, integers)
