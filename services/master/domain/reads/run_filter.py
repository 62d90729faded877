"""Determined's run filter: the tree the WebUI's filter builder and the SDK send as JSON text
(`{"filterGroup": {"kind": "group", "conjunction": "and", "children": [...]}, "showArchived": false}`,
each leaf `{"kind": "field", "columnName", "location", "operator", "type", "value"}`), read into a
bounded tree and turned into one SQL condition over a run (trials) and its experiment, or, for
Determined's experiments-search, over experiments.

What a leaf reads, by its location (Determined's LocationType):
- RUN, or none: the table's own columns (a run's, or an experiment's in experiments-search);
  EXPERIMENT: the experiment's columns (a run's experiment in the run table), Determined's names
  (`tags` is the experiment's labels);
- RUN_HYPERPARAMETERS (and HYPERPARAMETERS in the run table): the run's hyperparameter value;
  HYPERPARAMETERS in experiments-search: the experiment's configured hyperparameter
  (hp_spec_filter.py);
- VALIDATIONS, TRAINING, CUSTOM_METRIC: a summary metric (summary_paths.py), the run's own, or in
  experiments-search its best trial's (best_trial.py);
- RUN_METADATA: the run's metadata (`metadata.<key>.<key>`).
A value is read by the type of the operand (json_values.py); `type: COLUMN_TYPE_NUMBER` with a
numeric text compares it as a number. As in Determined, a condition with no value yet (the filter
builder's half-made one) holds for every row; `contains` ignores case on the general columns.

The text is bounded before it is parsed (size), and the tree while it is read (depth, leaves, each
value), so a hostile filter costs little. Every leaf names a column Cairn knows at a location it
knows; any other is refused, naming it, before anything is read or changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, String, and_, cast, false, func, not_, or_, true

from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.reads import derived_columns as derived
from services.master.domain.reads.best_trial import BEST_TRIAL
from services.master.domain.reads.hp_spec_filter import hp_spec_clause
from services.master.domain.reads.json_values import check_path, json_present, json_value, operand
from services.master.domain.reads.summary_paths import summary_path
from services.master.store import models

MAX_FILTER_BYTES = 64 * 1024
MAX_DEPTH = 8
MAX_LEAVES = 200
MAX_VALUE_CHARS = 4096

OPERATORS = ("=", "!=", "<", "<=", ">", ">=", "contains", "notContains", "isEmpty", "notEmpty")
# Determined's LocationType names.
OWN_LOCATIONS = ("", "LOCATION_TYPE_UNSPECIFIED", "LOCATION_TYPE_RUN")
EXPERIMENT_LOCATION = "LOCATION_TYPE_EXPERIMENT"
HP_LOCATION = "LOCATION_TYPE_HYPERPARAMETERS"
RUN_HP_LOCATION = "LOCATION_TYPE_RUN_HYPERPARAMETERS"
METRIC_LOCATIONS = ("LOCATION_TYPE_VALIDATIONS", "LOCATION_TYPE_TRAINING", "LOCATION_TYPE_CUSTOM_METRIC")
METADATA_LOCATION = "LOCATION_TYPE_RUN_METADATA"
NUMBER_TYPE = "COLUMN_TYPE_NUMBER"
_COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")


def _same(value: Any) -> Any:
    return value


def _state_value(value: Any) -> Any:
    return value.removeprefix("STATE_") if isinstance(value, str) else value


def _time_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise InvalidArgument(f"filter: {value!r} is not a time (ISO 8601)") from exc
    return value


@dataclass(frozen=True)
class Column:
    """A general column: its SQL, how a value is read for it, and whether it is the JSON text of a
    list (an experiment's labels: empty also when '' or '[]', as Determined reads `tags`)."""

    expr: Any
    read: Callable[[Any], Any] = _same
    json_list: bool = False
    # It is the best trial's (experiments-search joins that trial only when a filter reads it).
    best_trial: bool = False


class Source(StrEnum):
    COLUMN = "column"
    RUN_HP = "run hyperparameter"
    HP_SPEC = "configured hyperparameter"
    METRIC = "metric"
    METADATA = "metadata"


@dataclass(frozen=True)
class FieldTest:
    source: Source
    column: str  # the name as given
    target: Any  # a Column for a general column; a JSON path otherwise
    operator: str
    value: Any


@dataclass(frozen=True)
class Group:
    conjunction: str  # "and" | "or"
    children: tuple[Group | FieldTest, ...]


@dataclass(frozen=True)
class FilterTable:
    """What a filter is over: its own columns and its experiment's (Determined's names), what a
    hyperparameter leaf reads, where summary metrics come from, and whether a run's own locations
    (run hyperparameters, metadata) exist."""

    noun: str
    columns: Mapping[str, Column]
    experiment_columns: Mapping[str, Column]
    hp_source: Source
    summary_metrics: Any
    metrics_on_best_trial: bool
    run_locations: bool


@dataclass(frozen=True)
class RunFilter:
    root: Group | None
    show_archived: bool
    table: FilterTable
    # It reads experiments-search's best trial (best_trial.py), which the query must then join.
    reads_best_trial: bool = False


# Determined filters progress as a whole percentage.
_PERCENT_DONE = func.round(func.coalesce(models.Experiment.progress, 0) * 100)

# A run's experiment's columns, by Determined's experiment column names.
_EXPERIMENT_SIDE: dict[str, Column] = {
    "id": Column(models.Experiment.id),
    "name": Column(models.Experiment.name),
    "description": Column(models.Experiment.description),
    "tags": Column(models.Experiment.labels, json_list=True),
    "state": Column(models.Experiment.state, _state_value),
    "startTime": Column(models.Experiment.start_time, _time_value),
    "endTime": Column(models.Experiment.end_time, _time_value),
    "projectId": Column(models.Experiment.project_id),
    "user": Column(models.Experiment.owner_id),
    "userId": Column(models.Experiment.owner_id),
    "resourcePool": Column(models.Experiment.resource_pool),
    "forkedFrom": Column(models.Experiment.parent_id),
    "progress": Column(_PERCENT_DONE),
    "archived": Column(models.Experiment.archived),
    "searcherType": Column(derived.searcher_field("name")),
    "searcherMetric": Column(derived.searcher_field("metric")),
    "numTrials": Column(derived.trial_count()),
    "checkpointCount": Column(derived.experiment_checkpoints("count")),
    "checkpointSize": Column(derived.experiment_checkpoints("size")),
    "externalExperimentId": Column(models.Experiment.external_experiment_id),
}

# A run's columns (Determined's run column names): over models.Trial joined with its experiment.
_RUN_COLUMNS: dict[str, Column] = {
    "id": Column(models.Trial.id),
    "experimentId": Column(models.Trial.experiment_id),
    "state": Column(models.Trial.state, _state_value),
    "startTime": Column(models.Trial.start_time, _time_value),
    "endTime": Column(models.Trial.end_time, _time_value),
    "searcherMetricsVal": Column(models.Trial.searcher_metric_value),
    "searcherMetricValue": Column(models.Trial.searcher_metric_value),
    "projectId": Column(models.Experiment.project_id),
    "user": Column(models.Experiment.owner_id),
    "userId": Column(models.Experiment.owner_id),
    "experimentName": Column(models.Experiment.name),
    "name": Column(models.Experiment.name),
    "experimentDescription": Column(models.Experiment.description),
    "description": Column(models.Experiment.description),
    "tags": Column(models.Experiment.labels, json_list=True),
    "resourcePool": Column(models.Experiment.resource_pool),
    "forkedFrom": Column(models.Experiment.parent_id),
    "experimentProgress": Column(_PERCENT_DONE),
    "archived": Column(models.Trial.archived),
    "searcherType": Column(derived.searcher_field("name")),
    "searcherMetric": Column(derived.searcher_field("metric")),
    "checkpointCount": Column(derived.run_checkpoints("count")),
    "checkpointSize": Column(derived.run_checkpoints("size")),
    "externalExperimentId": Column(models.Experiment.external_experiment_id),
}

# An experiment's columns (Determined's experiments-search): over models.Experiment, and its best
# trial's searcher metric value.
_EXPERIMENT_COLUMNS: dict[str, Column] = {
    **_EXPERIMENT_SIDE,
    "searcherMetricsVal": Column(BEST_TRIAL.searcher_metric_value, best_trial=True),
}

RUNS = FilterTable(
    noun="runs",
    columns=_RUN_COLUMNS,
    experiment_columns=_EXPERIMENT_SIDE,
    hp_source=Source.RUN_HP,
    summary_metrics=models.Trial.summary_metrics,
    metrics_on_best_trial=False,
    run_locations=True,
)
EXPERIMENTS = FilterTable(
    noun="experiments",
    columns=_EXPERIMENT_COLUMNS,
    experiment_columns=_EXPERIMENT_COLUMNS,
    hp_source=Source.HP_SPEC,
    summary_metrics=BEST_TRIAL.summary_metrics,
    metrics_on_best_trial=True,
    run_locations=False,
)


@dataclass
class _Reading:
    """What reading one filter has counted so far."""

    leaves: int = 0
    best_trial: bool = False


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
    reading = _Reading()
    root = None if group is None else _read_group(group, f"{field}.filterGroup", 1, reading, table)
    return RunFilter(root=root, show_archived=show_archived, table=table, reads_best_trial=reading.best_trial)


def _read_group(raw: Any, where: str, depth: int, reading: _Reading, table: FilterTable) -> Group:
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
            children.append(_read_group(child, at, depth + 1, reading, table))
            continue
        reading.leaves += 1
        if reading.leaves > MAX_LEAVES:
            raise InvalidArgument(f"{where}: at most {MAX_LEAVES} conditions in a filter")
        children.append(_read_field(child, at, reading, table))
    return Group(conjunction=conjunction, children=tuple(children))


def _read_value(raw: dict[str, Any], where: str, operator: str) -> Any:
    value = raw.get("value")
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise InvalidArgument(f"{where}.value: must be a string, a number, a boolean or null")
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        raise InvalidArgument(f"{where}.value: at most {MAX_VALUE_CHARS} characters")
    if raw.get("type") == NUMBER_TYPE and isinstance(value, str) and operator in _COMPARISONS:
        try:
            return float(value)
        except ValueError as exc:
            raise InvalidArgument(f"{where}.value: {value!r} is not a number (type {NUMBER_TYPE})") from exc
    return value


def _refused(where: str, table: FilterTable, column: str, location: str) -> InvalidArgument:
    return InvalidArgument(
        f"{where}: Cairn does not filter {table.noun} on column {column!r} at {location or 'no location'}"
    )


def _read_field(raw: Any, where: str, reading: _Reading, table: FilterTable) -> FieldTest:
    if not isinstance(raw, dict) or raw.get("kind", "field") != "field":
        raise InvalidArgument(f"{where}: must be a field (kind 'field') or a group (kind 'group')")
    column, location = raw.get("columnName"), raw.get("location") or ""
    operator = raw.get("operator")
    if not isinstance(column, str) or not column:
        raise InvalidArgument(f"{where}.columnName: required")
    if not isinstance(location, str):
        raise InvalidArgument(f"{where}.location: must be a LocationType name")
    if operator not in OPERATORS:
        raise InvalidArgument(f"{where}.operator: must be one of {', '.join(OPERATORS)} (got {operator!r})")
    value = _read_value(raw, where, operator)
    name_at = f"{where}.columnName"
    source: Source
    target: Any
    if location in OWN_LOCATIONS or location == EXPERIMENT_LOCATION:
        columns = table.columns if location in OWN_LOCATIONS else table.experiment_columns
        found = columns.get(column)
        if found is None:
            raise _refused(where, table, column, location)
        source, target = Source.COLUMN, found
        reading.best_trial = reading.best_trial or found.best_trial
    elif location == HP_LOCATION or (location == RUN_HP_LOCATION and table.run_locations):
        source = table.hp_source if location == HP_LOCATION else Source.RUN_HP
        target = check_path(column.removeprefix("hp.").split("."), name_at, column, "a hyperparameter name")
    elif location in METRIC_LOCATIONS:
        source, target = Source.METRIC, summary_path(column, name_at)
        reading.best_trial = reading.best_trial or table.metrics_on_best_trial
    elif location == METADATA_LOCATION and table.run_locations:
        keys = column.removeprefix("metadata.").split(".")
        source, target = Source.METADATA, check_path(keys, name_at, column, "a metadata key")
    else:
        raise _refused(where, table, column, location)
    return FieldTest(source=source, column=column, target=target, operator=operator, value=value)


def run_filter_clause(f: RunFilter, dialect: str) -> ColumnElement[bool]:
    """The condition over models.Trial joined with its models.Experiment (or over models.Experiment,
    with best_trial.BEST_TRIAL joined where f.reads_best_trial); archived runs (or runs of archived
    experiments) only where the filter shows them. `dialect`: the database's ("postgresql" or
    "sqlite"), for the tests of a JSON value's type."""
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


def _json_of(test: FieldTest, table: FilterTable) -> Any:
    if test.source == Source.RUN_HP:
        return models.Trial.hparams
    if test.source == Source.METADATA:
        return models.Trial.run_metadata
    return table.summary_metrics


def _field_clause(test: FieldTest, table: FilterTable, dialect: str) -> ColumnElement[bool]:
    if test.value is None and test.operator not in ("isEmpty", "notEmpty"):
        return true()  # Determined's: a condition without a value yet holds for every row
    if test.source == Source.COLUMN:
        return _column_clause(test.target, test.operator, test.value)
    if test.source == Source.HP_SPEC:
        return hp_spec_clause(test.target, test.operator, test.value, dialect)
    column, path = _json_of(test, table), test.target
    if test.operator in ("isEmpty", "notEmpty"):
        present = json_present(column, path, dialect)
        return not_(present) if test.operator == "isEmpty" else present
    value, operator = test.value, test.operator
    if not isinstance(value, str) and operator in ("contains", "notContains"):
        # A number or boolean "contains" is its equality, as Determined's run hyperparameters read it.
        operator = "=" if operator == "contains" else "!="
    return _compare(json_value(column, path, dialect, value), operator, operand(value), missing_differs=False)


def _column_clause(column: Column, operator: str, value: Any) -> ColumnElement[bool]:
    if not column.json_list:
        read = None if value is None else column.read(value)
        return _compare(column.expr, operator, read, missing_differs=True, ignore_case=True)
    text = cast(column.expr, String)
    empty = or_(column.expr.is_(None), text == "", text == "[]")
    if operator in ("isEmpty", "notEmpty"):
        return empty if operator == "isEmpty" else not_(empty)
    as_text = value if isinstance(value, str) else json.dumps(value)
    return _compare(text, operator, as_text, missing_differs=True, ignore_case=True)


def _compare(
    column: Any, operator: str, value: Any, *, missing_differs: bool, ignore_case: bool = False
) -> ColumnElement[bool]:
    """`column operator value`. `missing_differs`: a row without the value is != any value (and
    does not contain it); otherwise a missing value matches nothing. `ignore_case`: `contains`
    ignores case (Determined's ILIKE on the general columns; its LIKE elsewhere)."""
    if operator == "isEmpty":
        return column.is_(None)
    if operator == "notEmpty":
        return column.is_not(None)
    if operator in ("contains", "notContains"):
        if not isinstance(value, str):
            return false()
        text = cast(column, String)
        holds = (text.icontains if ignore_case else text.contains)(value, autoescape=True)
        if operator == "contains":
            return holds
        return or_(not_(holds), column.is_(None)) if missing_differs else not_(holds)
    comparisons: dict[str, Callable[[], ColumnElement[bool]]] = {
        "=": lambda: column == value,
        "!=": lambda: or_(column != value, column.is_(None)) if missing_differs else column != value,
        "<": lambda: column < value,
        "<=": lambda: column <= value,
        ">": lambda: column > value,
        ">=": lambda: column >= value,
    }
    return comparisons[operator]()
