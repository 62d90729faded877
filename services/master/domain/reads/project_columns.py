"""The columns a project's experiment or run table offers (Determined's GetProjectColumns): the
general columns, then the hyperparameters of the project's experiments, then the metrics their
trials reported (validation, training, and other groups), each with its type, named as Determined
names them (`validation.validation_loss.last`, `.max`, `.mean`, `.min` for a number; `.last`
otherwise), which the run filter and sort read back (summary_paths.py).

Bounded: the newest MAX_EXPERIMENTS experiments of the project are read, and at most MAX_COLUMNS
columns of hyperparameters and metrics are offered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.master.domain.kernel.errors import NotFound
from services.master.domain.kernel.states import RunState
from services.master.store import models

MAX_EXPERIMENTS = 1000
MAX_COLUMNS = 2000
MAX_HP_DEPTH = 8

TEXT, NUMBER, DATE, ARRAY = "TEXT", "NUMBER", "DATE", "ARRAY"
# The aggregates Determined offers of a numeric metric, in its order.
NUMBER_AGGREGATES = ("last", "max", "mean", "min")


@dataclass(frozen=True)
class Column:
    column: str
    location: str  # Determined's LocationType without its prefix: EXPERIMENT, RUN, HYPERPARAMETERS...
    type: str  # TEXT, NUMBER, DATE, ARRAY
    display_name: str | None = None


_EXPERIMENT_COLUMNS = (
    Column("id", "EXPERIMENT", NUMBER, "ID"),
    Column("name", "EXPERIMENT", TEXT, "Name"),
    Column("description", "EXPERIMENT", TEXT, "Description"),
    Column("tags", "EXPERIMENT", ARRAY, "Tags"),
    Column("forkedFrom", "EXPERIMENT", NUMBER, "Forked"),
    Column("startTime", "EXPERIMENT", DATE, "Start time"),
    Column("duration", "EXPERIMENT", NUMBER, "Duration"),
    Column("numTrials", "EXPERIMENT", NUMBER, "Trial count"),
    Column("state", "EXPERIMENT", TEXT, "State"),
    Column("searcherType", "EXPERIMENT", TEXT, "Searcher"),
    Column("resourcePool", "EXPERIMENT", TEXT, "Resource pool"),
    Column("progress", "EXPERIMENT", NUMBER, "Progress"),
    Column("checkpointSize", "EXPERIMENT", NUMBER, "Checkpoint size"),
    Column("checkpointCount", "EXPERIMENT", NUMBER, "Checkpoints"),
    Column("user", "EXPERIMENT", TEXT, "User"),
    Column("searcherMetric", "EXPERIMENT", TEXT, "Searcher metric"),
    Column("searcherMetricsVal", "EXPERIMENT", NUMBER, "Searcher metric value"),
    Column("externalExperimentId", "EXPERIMENT", TEXT, "External experiment ID"),
    Column("externalTrialId", "EXPERIMENT", TEXT, "External trial ID"),
)

_RUN_COLUMNS = (
    Column("id", "RUN", NUMBER, "Global Run ID"),
    Column("experimentDescription", "RUN", TEXT, "Search description"),
    Column("experimentName", "RUN", TEXT, "Search name"),
    Column("experimentId", "RUN", NUMBER, "Search ID"),
    Column("startTime", "RUN", DATE, "Start time"),
    Column("endTime", "RUN", DATE, "End time"),
    Column("duration", "RUN", NUMBER, "Duration"),
    Column("state", "RUN", TEXT, "State"),
    Column("searcherType", "RUN", TEXT, "Searcher"),
    Column("resourcePool", "RUN", TEXT, "Resource pool"),
    Column("checkpointSize", "RUN", NUMBER, "Checkpoint size"),
    Column("checkpointCount", "RUN", NUMBER, "Checkpoints"),
    Column("user", "RUN", TEXT, "User"),
    Column("searcherMetric", "RUN", TEXT, "Searcher metric"),
    Column("searcherMetricsVal", "RUN", NUMBER, "Searcher metric value"),
    Column("externalExperimentId", "RUN", TEXT, "External experiment ID"),
    Column("externalRunId", "RUN", TEXT, "External run ID"),
    Column("experimentProgress", "RUN", NUMBER, "Search progress"),
    Column("isExpMultitrial", "RUN", TEXT, "Part of search"),
    Column("parentArchived", "RUN", TEXT, "Parent archived"),
)


def _value_type(value: Any) -> str:
    if isinstance(value, bool):
        return TEXT
    if isinstance(value, (int, float)):
        return NUMBER
    if isinstance(value, list):
        return ARRAY
    return TEXT


def _hp_type(spec: Any) -> str:
    """Determined's typing of a hyperparameter: int, double and log ranges are numbers; a const or
    categorical takes the type of its value(s); anything else is text."""
    if not isinstance(spec, dict):
        return _value_type(spec)
    kind = spec.get("type")
    if kind in ("int", "double", "log"):
        return NUMBER
    if kind == "const":
        return _value_type(spec.get("val"))
    if kind == "categorical":
        types = {_value_type(v) for v in spec.get("vals") or []}
        return types.pop() if len(types) == 1 else TEXT
    return TEXT


def _hp_columns(prefix: str, hparams: Any, depth: int, out: dict[str, str]) -> None:
    if not isinstance(hparams, dict) or depth > MAX_HP_DEPTH:
        return
    for name, spec in hparams.items():
        key = f"{prefix}{name}"
        nested = isinstance(spec, dict) and "type" not in spec
        if nested:
            _hp_columns(f"{key}.", spec, depth + 1, out)
        elif key not in out and len(out) < MAX_COLUMNS:
            out[key] = _hp_type(spec)


_GROUP_LOCATIONS = {
    "validation_metrics": ("validation", "VALIDATIONS"),
    "avg_metrics": ("training", "TRAINING"),
}


def project_columns(s: Session, project_id: int, *, runs: bool) -> list[Column]:
    if s.get(models.Project, project_id) is None:
        raise NotFound(f"id: project {project_id} not found")
    experiments = list(
        s.execute(
            select(models.Experiment.id, models.Experiment.config)
            .where(
                models.Experiment.project_id == project_id,
                models.Experiment.state.not_in([RunState.DELETING, RunState.DELETED]),
            )
            .order_by(models.Experiment.id.desc())
            .limit(MAX_EXPERIMENTS)
        ).all()
    )
    hps: dict[str, str] = {}
    for _id, config in experiments:
        _hp_columns("hp.", (config or {}).get("hyperparameters"), 1, hps)
    hp_location = "RUN_HYPERPARAMETERS" if runs else "HYPERPARAMETERS"
    columns = list(_RUN_COLUMNS if runs else _EXPERIMENT_COLUMNS)
    columns += [Column(name, hp_location, kind) for name, kind in sorted(hps.items())]
    metrics: dict[tuple[str, str], str] = {}
    summaries = s.scalars(
        select(models.Trial.summary_metrics).where(
            models.Trial.experiment_id.in_([e[0] for e in experiments])
        )
    )
    for summary in summaries:
        for group, section in (summary or {}).items():
            if not isinstance(section, dict):
                continue
            prefix, location = _GROUP_LOCATIONS.get(group, (group, "CUSTOM_METRIC"))
            for name, entry in section.items():
                if len(metrics) >= MAX_COLUMNS:
                    break
                number = isinstance(entry, dict) and "mean" in entry
                metrics.setdefault((f"{prefix}.{name}", location), NUMBER if number else TEXT)
    for (name, location), kind in sorted(metrics.items()):
        # Determined's names: a number's four aggregates, anything else its last value.
        aggregates = NUMBER_AGGREGATES if kind == NUMBER else ("last",)
        columns += [Column(f"{name}.{aggregate}", location, kind) for aggregate in aggregates]
    return columns
