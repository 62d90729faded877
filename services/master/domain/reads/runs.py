"""Determined's run table (SearchRuns): trials seen as runs, with their experiment, project and
workspace, filtered by Determined's run filter (run_filter.py), sorted by Determined's sort string
(a column, `hp.<name>`, or a metric column `<group>.<metric>.<aggregate>`), and paged by
Determined's paging rules; and the same for experiments (experiments-search), whose metric columns
are their best trial's (best_trial.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from services.master.domain.kernel.errors import InvalidArgument, NotFound
from services.master.domain.kernel.paging import Page, page_of
from services.master.domain.kernel.states import CheckpointState, RunState
from services.master.domain.reads import derived_columns as derived
from services.master.domain.reads import visibility
from services.master.domain.reads.best_trial import BEST_TRIAL, best_trial_join
from services.master.domain.reads.json_values import check_path, json_number, json_text
from services.master.domain.reads.run_filter import EXPERIMENTS, parse_run_filter, run_filter_clause
from services.master.domain.reads.summary_paths import summary_path
from services.master.store import models

MAX_SORT_CHARS = 1000
MAX_SORT_KEYS = 10

_SORT_COLUMNS: dict[str, Any] = {
    "id": models.Trial.id,
    "experimentId": models.Trial.experiment_id,
    "experimentName": models.Experiment.name,
    "experimentDescription": models.Experiment.description,
    "startTime": models.Trial.start_time,
    "endTime": models.Trial.end_time,
    "state": models.Trial.state,
    "experimentProgress": models.Experiment.progress,
    "user": models.Experiment.owner_id,
    "forkedFrom": models.Experiment.parent_id,
    "resourcePool": models.Experiment.resource_pool,
    "projectId": models.Experiment.project_id,
    "searcherMetricsVal": models.Trial.searcher_metric_value,
    "searcherType": derived.searcher_field("name"),
    "searcherMetric": derived.searcher_field("metric"),
    "checkpointCount": derived.run_checkpoints("count"),
    "checkpointSize": derived.run_checkpoints("size"),
    "externalExperimentId": models.Experiment.external_experiment_id,
}


@dataclass(frozen=True)
class RunRow:
    trial: models.Trial
    experiment: models.Experiment
    project: models.Project
    workspace: models.Workspace
    trial_count: int
    checkpoint_count: int
    checkpoint_size: int


_EXPERIMENT_SORT_COLUMNS: dict[str, Any] = {
    "id": models.Experiment.id,
    "name": models.Experiment.name,
    "description": models.Experiment.description,
    "startTime": models.Experiment.start_time,
    "endTime": models.Experiment.end_time,
    "state": models.Experiment.state,
    "progress": models.Experiment.progress,
    "user": models.Experiment.owner_id,
    "forkedFrom": models.Experiment.parent_id,
    "resourcePool": models.Experiment.resource_pool,
    "projectId": models.Experiment.project_id,
    # Determined's: the searcher metric value of the experiment's best trial.
    "searcherMetricsVal": BEST_TRIAL.searcher_metric_value,
    "searcherType": derived.searcher_field("name"),
    "searcherMetric": derived.searcher_field("metric"),
    "numTrials": derived.trial_count(),
    "checkpointCount": derived.experiment_checkpoints("count"),
    "checkpointSize": derived.experiment_checkpoints("size"),
    "externalExperimentId": models.Experiment.external_experiment_id,
}


@dataclass(frozen=True)
class SortTable:
    """What a sort string sorts: its columns, what `hp.<name>` and a metric column read."""

    noun: str
    columns: dict[str, Any]
    # The keys `hp.<name>` sorts by, from its path and the database's dialect.
    hp_keys: Any
    summary_metrics: Any
    metrics_on_best_trial: bool


def _run_hp_keys(path: tuple[str, ...], dialect: str) -> list[Any]:
    """A run's hyperparameter value: numbers in order, then text in order."""
    hparams = models.Trial.hparams
    return [json_number(hparams, path, dialect), json_text(hparams, path, dialect)]


def _configured_hp_keys(path: tuple[str, ...], dialect: str) -> list[Any]:
    """An experiment's configured hyperparameter (Determined orders by its config entry): a const's
    value or a range's lower end as a number, then a const's text."""
    config, spec = models.Experiment.config, ("hyperparameters", *path)
    number = func.coalesce(
        json_number(config, (*spec, "val"), dialect), json_number(config, (*spec, "minval"), dialect)
    )
    return [number, json_text(config, (*spec, "val"), dialect)]


RUN_SORTS = SortTable("runs", _SORT_COLUMNS, _run_hp_keys, models.Trial.summary_metrics, False)
EXPERIMENT_SORTS = SortTable(
    "experiments", _EXPERIMENT_SORT_COLUMNS, _configured_hp_keys, BEST_TRIAL.summary_metrics, True
)


@dataclass(frozen=True)
class SortPlan:
    order: list[Any]
    # It reads experiments-search's best trial, which the query must then join.
    reads_best_trial: bool


def _directed(key: Any, direction: str) -> Any:
    """Determined's null ordering: missing values last, ascending or descending."""
    return (key.asc() if direction == "asc" else key.desc()).nulls_last()


def _order(sort: str | None, dialect: str, table: SortTable = RUN_SORTS) -> SortPlan:
    """Determined's sort string ("col=asc,hp.lr=desc,validation.loss.last=asc"), then id ascending
    unless id was named. Missing values sort last in both directions (Determined's "ASC" and
    "DESC NULLS LAST" on PostgreSQL; SQLite would put them first ascending)."""
    by_id = table.columns["id"]
    if not sort:
        return SortPlan([by_id.asc()], False)
    if len(sort) > MAX_SORT_CHARS:
        raise InvalidArgument(f"sort: at most {MAX_SORT_CHARS} characters")
    params = sort.split(",")
    if len(params) > MAX_SORT_KEYS:
        raise InvalidArgument(f"sort: at most {MAX_SORT_KEYS} columns")
    order: list[Any] = []
    named_id = best_trial = False
    for param in params:
        column_name, _, direction = param.partition("=")
        if direction not in ("asc", "desc"):
            raise InvalidArgument(f"sort: invalid sort direction in {param!r} (asc or desc)")
        if column_name.startswith("hp."):
            path = check_path(column_name[3:].split("."), "sort", column_name, "a hyperparameter name")
            keys = table.hp_keys(path, dialect)
        elif column_name in table.columns:
            column = table.columns[column_name]
            keys = [column]
            named_id = named_id or column_name == "id"
            best_trial = best_trial or (column_name == "searcherMetricsVal" and table.metrics_on_best_trial)
        elif "." in column_name:
            path = summary_path(column_name, "sort")
            metrics = table.summary_metrics
            keys = [json_number(metrics, path, dialect), json_text(metrics, path, dialect)]
            best_trial = best_trial or table.metrics_on_best_trial
        else:
            raise InvalidArgument(f"sort: Cairn does not sort {table.noun} by {column_name!r}")
        order.extend(_directed(key, direction) for key in keys)
    if not named_id:
        order.append(by_id.asc())
    return SortPlan(order, best_trial)


def search_runs(
    s: Session,
    *,
    project_id: int | None,
    filter_text: str | None,
    sort: str | None,
    offset: int,
    limit: int,
    visible: visibility.Workspaces = None,
) -> tuple[list[RunRow], Page]:
    dialect = s.get_bind().dialect.name
    parsed = parse_run_filter(filter_text) if filter_text else None
    plan = _order(sort, dialect)
    if project_id is not None and s.get(models.Project, project_id) is None:
        raise NotFound(f"projectId: project {project_id} not found")
    q = (
        select(models.Trial.id)
        .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
        .where(models.Experiment.state.not_in([RunState.DELETING, RunState.DELETED]))
    )
    q = visibility.experiments(q, visible)
    if project_id is not None:
        q = q.where(models.Experiment.project_id == project_id)
    if parsed is not None:
        q = q.where(run_filter_clause(parsed, dialect))
    ids, page = _page_of_ids(s, q, plan.order, offset, limit)
    return run_rows(s, ids), page


def search_experiment_ids(
    s: Session,
    *,
    project_id: int | None,
    filter_text: str | None,
    sort: str | None,
    offset: int,
    limit: int,
    visible: visibility.Workspaces = None,
) -> tuple[list[int], Page]:
    """The ids of the experiments on the requested page of experiments-search, in order."""
    dialect = s.get_bind().dialect.name
    parsed = parse_run_filter(filter_text, table=EXPERIMENTS) if filter_text else None
    plan = _order(sort, dialect, EXPERIMENT_SORTS)
    if project_id is not None and s.get(models.Project, project_id) is None:
        raise NotFound(f"projectId: project {project_id} not found")
    q = select(models.Experiment.id).where(
        models.Experiment.state.not_in([RunState.DELETING, RunState.DELETED])
    )
    if plan.reads_best_trial or (parsed is not None and parsed.reads_best_trial):
        q = q.outerjoin(BEST_TRIAL, best_trial_join(dialect))
    q = visibility.experiments(q, visible)
    if project_id is not None:
        q = q.where(models.Experiment.project_id == project_id)
    if parsed is not None:
        q = q.where(run_filter_clause(parsed, dialect))
    return _page_of_ids(s, q, plan.order, offset, limit)


def _page_of_ids(s: Session, q: Select[Any], order: Any, offset: int, limit: int) -> tuple[list[int], Page]:
    """The ids `q` selects on the requested page, in `order`, with the page's bounds."""
    total = int(s.scalar(select(func.count()).select_from(q.subquery())) or 0)
    page = page_of(total, offset, limit)
    on_page = q.order_by(*order).offset(page.start)
    if page.limit >= 0:
        on_page = on_page.limit(page.end - page.start)
    return list(s.scalars(on_page)), page


def run_rows(s: Session, ids: list[int]) -> list[RunRow]:
    """The rows of these runs, in the order of `ids`."""
    if not ids:
        return []
    # The runs, then their experiments with projects and workspaces apart: a page's runs share a
    # few experiments, and a row joining each run to its experiment decoded the experiment's config
    # again for each.
    trials = s.scalars(select(models.Trial).where(models.Trial.id.in_(ids))).all()
    experiment_ids = list({trial.experiment_id for trial in trials})
    experiments = {
        exp.id: (exp, project, workspace)
        for exp, project, workspace in s.execute(
            select(models.Experiment, models.Project, models.Workspace)
            .join(models.Project, models.Project.id == models.Experiment.project_id)
            .join(models.Workspace, models.Workspace.id == models.Project.workspace_id)
            .where(models.Experiment.id.in_(experiment_ids))
        )
    }
    found = [
        (trial, *experiments[trial.experiment_id]) for trial in trials if trial.experiment_id in experiments
    ]
    counts = dict(
        s.execute(
            select(models.Trial.experiment_id, func.count(models.Trial.id))
            .where(models.Trial.experiment_id.in_(experiment_ids))
            .group_by(models.Trial.experiment_id)
        ).all()
    )
    checkpoints = {
        trial_id: (int(count), int(size))
        for trial_id, count, size in s.execute(
            select(
                models.Checkpoint.trial_id,
                func.count(models.Checkpoint.uuid),
                func.coalesce(func.sum(models.Checkpoint.size), 0),
            )
            .where(models.Checkpoint.trial_id.in_(ids), models.Checkpoint.state == CheckpointState.COMPLETED)
            .group_by(models.Checkpoint.trial_id)
        )
    }
    by_id = {
        trial.id: RunRow(
            trial=trial,
            experiment=exp,
            project=project,
            workspace=workspace,
            trial_count=int(counts.get(exp.id, 0)),
            checkpoint_count=checkpoints.get(trial.id, (0, 0))[0],
            checkpoint_size=checkpoints.get(trial.id, (0, 0))[1],
        )
        for trial, exp, project, workspace in found
    }
    return [by_id[i] for i in ids if i in by_id]
