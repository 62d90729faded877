"""Determined's run filter: the tree the WebUI's filter builder and the SDK send as JSON text
(`{"filterGroup": {"kind": "group", "conjunction": "and", "children": [...]}, "showArchived": false}`,
each leaf `{"kind": "field", "columnName", "location", "operator", "type", "value"}`), read into a
bounded tree and turned into one SQL condition over a run (trials) and its experiment, or, for
Determined's experiments-search, over experiments.

The text is bounded before it is parsed (size), and the tree while it is read (depth, leaves), so a
hostile filter costs little. Every leaf names a column Cairn knows; any other is refused, naming it,
before anything is read or changed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, String, and_, case, cast, false, func, not_, or_, true

from services.master.domain.kernel.errors import InvalidArgument
from services.master.store import models

MAX_FILTER_BYTES = 64 * 1024
MAX_DEPTH = 8
MAX_LEAVES = 200
MAX_HP_PATH = 8

OPERATORS = ("=", "!=", "<", "<=", ">", ">=", "contains", "notContains", "isEmpty", "notEmpty")
RUN_LOCATIONS = ("LOCATION_TYPE_UNSPECIFIED", "LOCATION_TYPE_RUN", "LOCATION_TYPE_EXPERIMENT", "")
HP_LOCATIONS = ("LOCATION_TYPE_HYPERPARAMETERS", "LOCATION_TYPE_RUN_HYPERPARAMETERS")
# A hyperparameter name's parts: what a JSON path may hold unquoted on every database.
_HP_PART = re.compile(r"^[A-Za-z0-9_\-]{1,255}$")


@dataclass(frozen=True)
class FieldTest:
    column: str
    location: str
    operator: str
    value: Any


@dataclass(frozen=True)
class Group:
    conjunction: str  # "and" | "or"
    children: tuple[Group | FieldTest, ...]


@dataclass(frozen=True)
class FilterTable:
    """What a filter is over: its columns (Determined's names -> the SQL column and how a value
    is read), whether leaves may name hyperparameters, and what "archived" means there."""

    noun: str
    columns: dict[str, tuple[Any, Callable[[Any], Any]]]
    hyperparameters: bool


@dataclass(frozen=True)
class RunFilter:
    root: Group | None
    show_archived: bool
    table: FilterTable


def _state_value(value: Any) -> Any:
    return value.removeprefix("STATE_") if isinstance(value, str) else value


def _time_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise InvalidArgument(f"filter: {value!r} is not a time (ISO 8601)") from exc
    return value


def _same(value: Any) -> Any:
    return value


# A run's columns (Determined's names): over models.Trial joined with its models.Experiment.
_RUN_COLUMNS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "id": (models.Trial.id, _same),
    "experimentId": (models.Trial.experiment_id, _same),
    "state": (models.Trial.state, _state_value),
    "startTime": (models.Trial.start_time, _time_value),
    "endTime": (models.Trial.end_time, _time_value),
    "searcherMetricsVal": (models.Trial.searcher_metric_value, _same),
    "searcherMetricValue": (models.Trial.searcher_metric_value, _same),
    "projectId": (models.Experiment.project_id, _same),
    "userId": (models.Experiment.owner_id, _same),
    "experimentName": (models.Experiment.name, _same),
    "name": (models.Experiment.name, _same),
    "experimentDescription": (models.Experiment.description, _same),
    "description": (models.Experiment.description, _same),
    "resourcePool": (models.Experiment.resource_pool, _same),
    "forkedFrom": (models.Experiment.parent_id, _same),
    "experimentProgress": (models.Experiment.progress, _same),
    "archived": (models.Trial.archived, _same),
}

# An experiment's columns (Determined's experiments-search): over models.Experiment alone.
_EXPERIMENT_COLUMNS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "id": (models.Experiment.id, _same),
    "name": (models.Experiment.name, _same),
    "description": (models.Experiment.description, _same),
    "state": (models.Experiment.state, _state_value),
    "startTime": (models.Experiment.start_time, _time_value),
    "endTime": (models.Experiment.end_time, _time_value),
    "projectId": (models.Experiment.project_id, _same),
    "userId": (models.Experiment.owner_id, _same),
    "resourcePool": (models.Experiment.resource_pool, _same),
    "forkedFrom": (models.Experiment.parent_id, _same),
    "progress": (models.Experiment.progress, _same),
    "archived": (models.Experiment.archived, _same),
}

RUNS = FilterTable(noun="runs", columns=_RUN_COLUMNS, hyperparameters=True)
EXPERIMENTS = FilterTable(noun="experiments", columns=_EXPERIMENT_COLUMNS, hyperparameters=False)


def parse_run_filter(text: str, field: str = "filter", table: FilterTable = RUNS) -> RunFilter:
    """The filter `text` over `table` as a bounded tree; InvalidArgument naming `field` where it
    is not one."""
    if len(text.encode()) > MAX_FILTER_BYTES:
        raise InvalidArgument(f"{field}: at most {MAX_FILTER_BYTES} bytes of JSON")
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"{field}: not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise InvalidArgument(f"{field}: must be a JSON object with filterGroup and showArchived")
    show_archived = raw.get("showArchived", False)
    if not isinstance(show_archived, bool):
        raise InvalidArgument(f"{field}.showArchived: must be true or false")
    group = raw.get("filterGroup")
    leaves = [0]
    root = None if group is None else _read_group(group, f"{field}.filterGroup", 1, leaves, table)
    return RunFilter(root=root, show_archived=show_archived, table=table)


def _read_group(raw: Any, where: str, depth: int, leaves: list[int], table: FilterTable) -> Group:
    if depth > MAX_DEPTH:
        raise InvalidArgument(f"{where}: groups nest at most {MAX_DEPTH} deep")
    if not isinstance(raw, dict):
        raise InvalidArgument(f"{where}: must be an object")
    conjunction = raw.get("conjunction", "and")
    if conjunction not in ("and", "or"):
        raise InvalidArgument(f"{where}.conjunction: must be 'and' or 'or' (got {conjunction!r})")
    children_raw = raw.get("children", [])
    if not isinstance(children_raw, list):
        raise InvalidArgument(f"{where}.children: must be a list")
    children: list[Group | FieldTest] = []
    for i, child in enumerate(children_raw):
        at = f"{where}.children[{i}]"
        if isinstance(child, dict) and child.get("kind") == "group":
            children.append(_read_group(child, at, depth + 1, leaves, table))
            continue
        leaves[0] += 1
        if leaves[0] > MAX_LEAVES:
            raise InvalidArgument(f"{where}: at most {MAX_LEAVES} conditions in a filter")
        children.append(_read_field(child, at, table))
    return Group(conjunction=conjunction, children=tuple(children))


def _read_field(raw: Any, where: str, table: FilterTable) -> FieldTest:
    if not isinstance(raw, dict) or raw.get("kind", "field") != "field":
        raise InvalidArgument(f"{where}: must be a field (kind 'field') or a group (kind 'group')")
    column, location = raw.get("columnName"), raw.get("location") or ""
    operator, value = raw.get("operator"), raw.get("value")
    if not isinstance(column, str) or not column:
        raise InvalidArgument(f"{where}.columnName: required")
    if operator not in OPERATORS:
        raise InvalidArgument(f"{where}.operator: must be one of {', '.join(OPERATORS)} (got {operator!r})")
    if location in HP_LOCATIONS and table.hyperparameters:
        path = column.removeprefix("hp.").split(".")
        if len(path) > MAX_HP_PATH or not all(_HP_PART.match(part) for part in path):
            raise InvalidArgument(f"{where}.columnName: {column!r} is not a hyperparameter name")
    elif location not in RUN_LOCATIONS or column not in table.columns:
        raise InvalidArgument(
            f"{where}: Cairn does not filter {table.noun} on column {column!r} at {location or 'no location'}"
        )
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise InvalidArgument(f"{where}.value: must be a string, a number, a boolean or null")
    return FieldTest(column=column, location=location, operator=operator, value=value)


def run_filter_clause(f: RunFilter, dialect: str) -> ColumnElement[bool]:
    """The condition over models.Trial joined with its models.Experiment; archived runs (or runs
    of archived experiments) only where the filter shows them. `dialect`: the database's
    ("postgresql" or "sqlite"), for the test of a JSON value's type."""
    clause = true() if f.root is None else _group_clause(f.root, f.table, dialect)
    if not f.show_archived:
        clause = and_(clause, models.Experiment.archived.is_(False))
        if f.table is RUNS:
            clause = and_(clause, models.Trial.archived.is_(False))
    return clause


def _group_clause(group: Group, table: FilterTable, dialect: str) -> ColumnElement[bool]:
    parts = [
        _group_clause(c, table, dialect) if isinstance(c, Group) else _field_clause(c, table, dialect)
        for c in group.children
    ]
    if not parts:
        return true()
    return and_(*parts) if group.conjunction == "and" else or_(*parts)


def _hp_number(path: tuple[str, ...], dialect: str) -> Any:
    """A hyperparameter's value as a number where it is one, else NULL: a text value compared
    with a number is no match, never a database error."""
    element = models.Trial.hparams[path]
    if dialect == "postgresql":
        is_number = func.json_typeof(element) == "number"
    else:
        json_path = "$" + "".join(f".{part}" for part in path)
        is_number = func.json_type(models.Trial.hparams, json_path).in_(("integer", "real"))
    return case((is_number, element.as_float()), else_=None)


def _field_clause(test: FieldTest, table: FilterTable, dialect: str) -> ColumnElement[bool]:
    if test.location in HP_LOCATIONS:
        path = tuple(test.column.removeprefix("hp.").split("."))
        as_number = isinstance(test.value, (int, float)) and not isinstance(test.value, bool)
        column: Any = _hp_number(path, dialect) if as_number else models.Trial.hparams[path].as_string()
        return _compare(column, test.operator, test.value)
    column, read_value = table.columns[test.column]
    return _compare(column, test.operator, None if test.value is None else read_value(test.value))


def _compare(column: Any, operator: str, value: Any) -> ColumnElement[bool]:
    if operator == "isEmpty":
        return column.is_(None)
    if operator == "notEmpty":
        return column.is_not(None)
    if operator in ("contains", "notContains"):
        if not isinstance(value, str):
            return false()
        test = cast(column, String).contains(value, autoescape=True)
        return test if operator == "contains" else or_(not_(test), column.is_(None))
    if value is None:
        return column.is_(None) if operator == "=" else column.is_not(None) if operator == "!=" else false()
    comparisons: dict[str, Callable[[], ColumnElement[bool]]] = {
        "=": lambda: column == value,
        "!=": lambda: or_(column != value, column.is_(None)),
        "<": lambda: column < value,
        "<=": lambda: column <= value,
        ">": lambda: column > value,
        ">=": lambda: column >= value,
    }
    return comparisons[operator]()
