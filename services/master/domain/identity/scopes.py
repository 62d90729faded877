"""Which workspace an object lives in: the scope access.py decides on. An experiment lives where
its project does; a task where it was launched (none: the Uncategorized workspace, where work
that names no workspace goes); a model, a template, a webhook in their workspace column.

Each is one indexed read of a row the caller usually holds already, in the caller's session.
"""

from __future__ import annotations

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from services.master.store import models

UNCATEGORIZED = models.UNCATEGORIZED_WORKSPACE_ID


_WORKSPACE_OF_PROJECT = select(models.Project.workspace_id).where(
    models.Project.id == bindparam("project_id")
)


def of_project(s: Session, project_id: int) -> int:
    found = of_project_id(s, project_id)
    return found if found is not None else UNCATEGORIZED


def of_project_id(s: Session, project_id: int) -> int | None:
    """The workspace of the project, or None when there is no such project."""
    found = s.scalar(_WORKSPACE_OF_PROJECT, {"project_id": project_id})
    return int(found) if found is not None else None


def of_experiment(s: Session, exp: models.Experiment) -> int:
    return of_project(s, exp.project_id)


def of_experiment_id(s: Session, experiment_id: int) -> int | None:
    """The workspace of the experiment, or None when there is no such experiment."""
    row = s.execute(
        select(models.Project.workspace_id)
        .join(models.Experiment, models.Experiment.project_id == models.Project.id)
        .where(models.Experiment.id == experiment_id)
    ).first()
    return int(row[0]) if row is not None else None


def of_trials(s: Session, trial_ids: list[int]) -> dict[int, int]:
    """The workspace of each of these trials that exists (one query)."""
    rows = s.execute(
        select(models.Trial.id, models.Project.workspace_id)
        .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
        .join(models.Project, models.Project.id == models.Experiment.project_id)
        .where(models.Trial.id.in_(trial_ids))
    )
    return {int(t): int(w) for t, w in rows}


def of_task(s: Session, task: models.Task) -> int:
    """Where the task lives: a trial's task with its experiment (the column is set when the trial
    is created and moved with its experiment: experiment_projects.py), another where it was
    launched; the task listings filter by the same column (reads/visibility.py)."""
    del s  # the row says it
    return task.workspace_id if task.workspace_id is not None else UNCATEGORIZED


def of_model(model: models.RegisteredModel) -> int:
    return model.workspace_id


def of_template(template: models.Template) -> int:
    return template.workspace_id
