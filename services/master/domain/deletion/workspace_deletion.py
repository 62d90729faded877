"""Deleting a project or a workspace, which deletes their experiments, as Determined does.

The request is checked whole first (owner or admin, not a built-in, every experiment finished,
no registered model left in the workspace), so a refused request changes nothing. As on Determined,
the commands, notebooks, shells, TensorBoards and generic tasks still running in the workspace (or
project) are killed by the request; they stay readable by id after the workspace is gone (their
workspace and project read as none), so a deletion never trips over them. Empty ones go at
once (`completed`). Otherwise the project (and workspace) are marked DELETING, every experiment is
marked DELETING in the same transaction (which owes its deletion: deletion.py), and the project's
or workspace's own finish is owed too (deferred_work.py). The deferred-work loop deletes the
experiments; the finish waits until none of them is owed any more, then removes the projects (and
workspace) left empty and marks what still holds experiments DELETE_FAILED. A workspace's config
templates go with it.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, func, select, update

from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.experiments.experiments import transition
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel import deferred_work
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import FailedPrecondition
from services.master.domain.kernel.states import (
    TASK_ENDED,
    TERMINAL,
    WS,
    RunState,
    TaskKind,
    WorkspaceState,
    check_workspace,
)
from services.master.domain.reads.models import describe_registered, registered_in_experiment
from services.master.domain.tasks import tasks as task_lifecycle
from services.master.domain.workspaces import workspaces
from services.master.store import models

log = get_logger(__name__)

_DELETABLE = frozenset({*TERMINAL, RunState.DELETE_FAILED, RunState.DELETING})

# The tasks a workspace's (or project's) deletion kills, as Determined's does: its commands,
# notebooks, shells, TensorBoards and generic tasks. Trials go with their experiments (which must
# have ended), and a checkpoint GC task runs on to its end: it is what deleting experiments starts.
_KILLED_KINDS = (TaskKind.COMMAND, TaskKind.NOTEBOOK, TaskKind.SHELL, TaskKind.TENSORBOARD, TaskKind.GENERIC)


def _kill_tasks(ctx: MasterContext, w: Work, *, workspace_id: int | None, project_ids: Sequence[int]) -> None:
    """Kill the live tasks of the kinds above in the workspace or in the projects."""
    where = (
        models.Task.workspace_id == workspace_id
        if workspace_id is not None
        else models.Task.project_id.in_(list(project_ids))
    )
    live = w.session.scalars(
        select(models.Task)
        .where(where, models.Task.kind.in_(_KILLED_KINDS), models.Task.state.not_in(list(TASK_ENDED)))
        .order_by(models.Task.start_time, models.Task.id)
    )
    for task in live:
        task_lifecycle.kill(ctx, w, task)


def _experiments_in(w: Work, project_ids: Sequence[int]) -> list[models.Experiment]:
    if not project_ids:
        return []
    return list(
        w.session.scalars(
            select(models.Experiment)
            .where(models.Experiment.project_id.in_(list(project_ids)))
            .order_by(models.Experiment.id)
        )
    )


def _check_all_finished(kind: str, row_id: int, experiments: list[models.Experiment]) -> None:
    running = [e.id for e in experiments if e.state not in _DELETABLE]
    if running:
        listed = ", ".join(str(i) for i in running[:20])
        raise FailedPrecondition(
            f"{kind} {row_id} has experiments that have not finished ({listed}): cancel or kill them first"
        )


def _mark_deleting(ctx: MasterContext, w: Work, experiments: list[models.Experiment]) -> None:
    """Mark the experiments DELETING (which owes their deletion), unless already on their way."""
    for exp in experiments:
        # As for one experiment's deletion: a checkpoint registered in a model (of any workspace)
        # keeps its experiment; refused before anything is marked.
        registered = registered_in_experiment(w.session, exp.id)
        if registered:
            raise FailedPrecondition(
                f"experiment {exp.id} cannot be deleted: {describe_registered(registered)}; "
                "delete those model versions first"
            )
    for exp in experiments:
        if exp.state != RunState.DELETING:
            transition(ctx, w, exp, RunState.DELETING, "its project is being deleted")


def delete_project(ctx: MasterContext, principal: Principal, project_id: int) -> bool:
    """Delete the project and its experiments; whether it is gone already (else it goes in the
    background and GetProject shows it DELETING until then)."""
    with ctx.unit_of_work() as w:
        project, workspace = workspaces.load_project(w, project_id)
        workspaces.check_can_manage_project(
            w.session, principal, project, workspace, "delete", Permission.DELETE_PROJECT
        )
        if project.immutable:
            raise FailedPrecondition(
                f"project {project.id} ({project.name}) is built in: it cannot be deleted"
            )
        if project.state == WS.DELETING:
            raise FailedPrecondition(f"project {project.id} is already being deleted")
        experiments = _experiments_in(w, [project.id])
        _check_all_finished("project", project.id, experiments)
        _kill_tasks(ctx, w, workspace_id=None, project_ids=[project.id])
        if not experiments:
            w.session.execute(delete(models.Project).where(models.Project.id == project.id))
            log.info("project deleted", project_id=project_id)
            return True
        _move("project", project, WS.DELETING)
        _mark_deleting(ctx, w, experiments)
        deferred_work.owe(w, deferred_work.FINISH_PROJECT_DELETION, project.id)
    return False


def delete_workspace(ctx: MasterContext, principal: Principal, workspace_id: int) -> bool:
    """Delete the workspace, its projects and their experiments; whether it is gone already."""
    with ctx.unit_of_work() as w:
        workspace = workspaces.load_workspace(w, workspace_id)
        workspaces.check_can_manage_workspace(
            w.session, principal, workspace, "delete", Permission.DELETE_WORKSPACE
        )
        if workspace.immutable:
            raise FailedPrecondition(
                f"workspace {workspace.id} ({workspace.name}) is built in: it cannot be deleted"
            )
        if workspace.state == WS.DELETING:
            raise FailedPrecondition(f"workspace {workspace.id} is already being deleted")
        models_held = w.session.scalar(
            select(func.count())
            .select_from(models.RegisteredModel)
            .where(models.RegisteredModel.workspace_id == workspace.id)
        )
        if models_held:
            raise FailedPrecondition(
                f"workspace {workspace.id} holds {models_held} registered model(s): move or delete them first"
            )
        projects = list(
            w.session.scalars(select(models.Project).where(models.Project.workspace_id == workspace.id))
        )
        project_ids = [p.id for p in projects]
        experiments = _experiments_in(w, project_ids)
        _check_all_finished("workspace", workspace.id, experiments)
        _kill_tasks(ctx, w, workspace_id=workspace.id, project_ids=project_ids)
        if not experiments:
            _remove_empty(w, project_ids, workspace.id)
            log.info("workspace deleted", workspace_id=workspace_id)
            return True
        _move("workspace", workspace, WS.DELETING)
        for project in projects:
            if project.state != WS.DELETING:  # one being deleted on its own is taken along as it is
                _move("project", project, WS.DELETING)
        _mark_deleting(ctx, w, experiments)
        deferred_work.owe(w, deferred_work.FINISH_WORKSPACE_DELETION, workspace.id)
    return False


def _move(kind: str, row: models.Workspace | models.Project, target: WorkspaceState) -> None:
    """Every change of a workspace's or project's state: checked against its table."""
    check_workspace(kind, row.state, target)
    log.info(f"{kind} state", id=row.id, previous=row.state or "LIVE", state=target.value)
    row.state = target


def _remove_empty(w: Work, project_ids: Sequence[int], workspace_id: int | None) -> None:
    """Delete the rows of the projects (and workspace), which hold no experiment any more. Their
    tasks (killed by the request, or ended before it) are kept, no longer in them."""
    if project_ids:
        w.session.execute(
            update(models.Task).where(models.Task.project_id.in_(list(project_ids))).values(project_id=None)
        )
        w.session.execute(delete(models.Project).where(models.Project.id.in_(list(project_ids))))
    if workspace_id is not None:
        w.session.execute(
            update(models.Task).where(models.Task.workspace_id == workspace_id).values(workspace_id=None)
        )
        w.session.execute(delete(models.Template).where(models.Template.workspace_id == workspace_id))
        w.session.execute(delete(models.Webhook).where(models.Webhook.workspace_id == workspace_id))
        w.session.execute(delete(models.Workspace).where(models.Workspace.id == workspace_id))


def finish_project(ctx: MasterContext, project_id: int) -> bool:
    """The deferred work that ends a project's deletion; False while its experiments are owed."""
    with ctx.unit_of_work() as w:
        project = w.session.get(models.Project, project_id)
        if project is None or project.state != WS.DELETING:
            return True
        return _finish(w, [project_id], None)


def finish_workspace(ctx: MasterContext, workspace_id: int) -> bool:
    """The deferred work that ends a workspace's deletion; False while its experiments are owed."""
    with ctx.unit_of_work() as w:
        workspace = w.session.get(models.Workspace, workspace_id)
        if workspace is None or workspace.state != WS.DELETING:
            return True
        project_ids = list(
            w.session.scalars(select(models.Project.id).where(models.Project.workspace_id == workspace_id))
        )
        return _finish(w, project_ids, workspace_id)


def _finish(w: Work, project_ids: list[int], workspace_id: int | None) -> bool:
    # Every experiment of theirs being deleted, by this request or a user's just before, goes first.
    experiment_ids = [e.id for e in _experiments_in(w, project_ids)]
    if deferred_work.is_owed(w, deferred_work.DELETE_EXPERIMENT, experiment_ids):
        return False
    _settle(w, project_ids, workspace_id)
    return True


def _settle(w: Work, project_ids: list[int], workspace_id: int | None) -> None:
    """Remove the projects (and workspace) left empty; mark the rest DELETE_FAILED."""
    remaining = {
        project_id
        for (project_id,) in w.session.execute(
            select(models.Experiment.project_id)
            .where(models.Experiment.project_id.in_(project_ids))
            .distinct()
        )
    }
    for project in w.session.scalars(select(models.Project).where(models.Project.id.in_(project_ids))):
        if project.id in remaining and project.state == WS.DELETING:
            _move("project", project, WS.DELETE_FAILED)
    empty = [p for p in project_ids if p not in remaining]
    keep_workspace = workspace_id is not None and bool(remaining)
    _remove_empty(w, empty, None if keep_workspace else workspace_id)
    if keep_workspace:
        workspace = w.session.get(models.Workspace, workspace_id)
        if workspace is not None:
            _move("workspace", workspace, WS.DELETE_FAILED)
    log.info(
        "deletion finished",
        workspace_id=workspace_id,
        deleted_projects=empty,
        failed_projects=sorted(remaining),
    )
