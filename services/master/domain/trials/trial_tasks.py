"""A trial's task row: created with the trial, ended with it, reopened when `det experiment
continue` reopens the trial. The trial lifecycle stays the owner of a trial's state; its task only
records it, so that every kind of task is listed and read the same way."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, String, cast

from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.states import TASK_ENDED, RunState, TaskKind, TaskState
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.domain.reads.jobs import experiment_job_id
from services.master.domain.tasks import tasks
from services.master.store import models
from services.master.store.inserted import insert_rows

# The trial's terminal states, as its task's.
_ENDED_AS = {
    RunState.COMPLETED: TaskState.COMPLETED,
    RunState.CANCELED: TaskState.CANCELED,
    RunState.ERROR: TaskState.ERROR,
}


def record(w: Work, exp: models.Experiment, trial: models.Trial) -> models.Task:
    """The task of a trial just created (in the same transaction)."""
    task = models.Task(**_task_row(exp, trial, _workspace_id(w, exp)))
    w.session.add(task)
    return task


def insert_many(w: Work, exp: models.Experiment, trials: list[models.Trial]) -> None:
    """The tasks of trials just created (in the same transaction), in one INSERT statement: a
    search's trials come by the hundred, and making each task an object for the flush cost more
    than storing it. Nothing reads them back in the unit that makes them (a trial's later changes
    read its task anew, trial_tasks.follow)."""
    workspace_id = _workspace_id(w, exp)
    insert_rows(w.session, models.Task, [_task_row(exp, trial, workspace_id) for trial in trials])


def _workspace_id(w: Work, exp: models.Experiment) -> int | None:
    project = w.session.get(models.Project, exp.project_id)
    return project.workspace_id if project is not None else None


def _task_row(exp: models.Experiment, trial: models.Trial, workspace_id: int | None) -> dict[str, Any]:
    return {
        "id": trial_task_id(exp.id, trial.request_id),
        "kind": TaskKind.TRIAL,
        "owner_id": exp.owner_id,
        "description": f"Trial {trial.id} (Experiment {exp.id})",
        "config": None,
        "job_id": experiment_job_id(exp.id),
        "state": TaskState.ACTIVE,
        "start_time": trial.start_time,
        "resource_pool": exp.resource_pool,
        "slots": 0,
        "run_id": 0,
        "workspace_id": workspace_id,
        "project_id": exp.project_id,
        "experiment_id": exp.id,
        "no_pause": False,
    }


def task_id_column() -> ColumnElement[str]:
    """A trial row's task id in SQL, as trial_task_id spells it (to read a trial with its task)."""
    return cast(models.Trial.experiment_id, String) + "." + models.Trial.request_id


def follow(
    ctx: MasterContext, w: Work, exp_id: int, trial: models.Trial, target: RunState, *, continuing: bool
) -> None:
    """The trial moved to `target`: its task ends with it, or runs again when continued, through
    the task's own transition function like every other task."""
    task = w.session.get(models.Task, trial_task_id(exp_id, trial.request_id))
    if task is None:
        return
    if continuing and task.state in TASK_ENDED:
        tasks.transition(ctx, w, task, TaskState.ACTIVE, f"trial {trial.id} continued", continuing=True)
        return
    ended = _ENDED_AS.get(target)
    if ended is None or task.state == ended:
        return
    tasks.transition(ctx, w, task, ended, f"trial {trial.id} is {target.value}")
    task.run_id = trial.run_id
