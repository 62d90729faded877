"""What a caller may see, put in a query's WHERE: every listing, count and search of the read
model takes the set of workspaces the caller may read (identity/access.readable_workspaces,
computed once per call; None: all of them) and keeps only the rows that live there. In SQL, so a
page, its total and its sort see the same rows, and no row of a hidden workspace is ever loaded.

Each kind of row lives where identity/scopes.py says: an experiment (and its trials, checkpoints,
metrics) in its project's workspace, a task in the workspace it was launched in (none: the
Uncategorized workspace), a model, a template, a project in their workspace column.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, false, or_, select, true

from services.master.store import models

# Where the caller may read: a set of workspace ids, or None for all of them.
Workspaces = Collection[int] | None


def projects_in(workspaces: Collection[int]) -> Select[Any]:
    return select(models.Project.id).where(models.Project.workspace_id.in_(list(workspaces)))


def experiment_clause(workspaces: Collection[int]) -> ColumnElement[bool]:
    if not workspaces:
        return false()
    return models.Experiment.project_id.in_(projects_in(workspaces))


def experiments(q: Any, workspaces: Workspaces) -> Any:
    """`q` (over experiments) kept to those in `workspaces`."""
    return q if workspaces is None else q.where(experiment_clause(workspaces))


def experiment_ids_in(workspaces: Collection[int]) -> Select[Any]:
    return select(models.Experiment.id).where(experiment_clause(workspaces))


def trials(q: Any, workspaces: Workspaces) -> Any:
    """`q` (over trials) kept to those of experiments in `workspaces`."""
    if workspaces is None:
        return q
    return q.where(models.Trial.experiment_id.in_(experiment_ids_in(workspaces)))


def task_clause(workspaces: Collection[int]) -> ColumnElement[bool]:
    if not workspaces:
        return false()
    clause: ColumnElement[bool] = models.Task.workspace_id.in_(list(workspaces))
    if models.UNCATEGORIZED_WORKSPACE_ID in workspaces:
        clause = or_(clause, models.Task.workspace_id.is_(None))
    return clause


def tasks(q: Any, workspaces: Workspaces) -> Any:
    """`q` (over tasks) kept to those launched in `workspaces`."""
    return q if workspaces is None else q.where(task_clause(workspaces))


def tasks_seen(q: Any, nsc: Workspaces, experiments: Workspaces) -> Any:
    """`q` (over tasks) kept to trials' tasks in `experiments` and other tasks in `nsc` (the
    workspaces where the caller may read experiments, and notebooks, shells and commands). A
    trial's task carries its experiment's workspace (experiment_projects.py moves it along)."""
    if nsc is None and experiments is None:
        return q
    trial = models.Task.kind == "TRIAL"
    seen_trials = true() if experiments is None else task_clause(experiments)
    seen_others = true() if nsc is None else task_clause(nsc)
    return q.where(or_(and_(trial, seen_trials), and_(~trial, seen_others)))


def in_column(q: Any, column: Any, workspaces: Workspaces) -> Any:
    """`q` kept to rows whose workspace column is in `workspaces` (models, templates, projects,
    workspaces themselves by their id)."""
    if workspaces is None:
        return q
    return q.where(column.in_(list(workspaces))) if workspaces else q.where(false())
