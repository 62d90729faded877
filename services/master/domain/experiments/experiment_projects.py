"""Which project an experiment is in: the project a new experiment goes to (as Determined decides
it, from the request's project id or the config's `workspace` and `project` keys) with its
workspace's defaults for the config, and moving an experiment to another project.

A project takes new experiments, by creation or by a move, unless it or its workspace is archived or
being deleted; experiments do not move out of an archived project, and an archived experiment does
not move. Creating one in a project, or moving one there, takes CREATE_EXPERIMENT on its
workspace; moving one out takes UPDATE_EXPERIMENT on it (identity/access.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.config import ConfigError, parse_config_text
from services.master.domain.experiments.experiments import check_can_modify
from services.master.domain.experiments.experiments import load as load_experiment
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import FailedPrecondition, InvalidArgument, NotFound
from services.master.domain.kernel.states import WS
from services.master.domain.kernel.topics import experiment_topic
from services.master.domain.reads.workspaces import project_id_by_names
from services.master.domain.workspaces.workspaces import (
    check_not_deleting,
    load_project,
    project_with_workspace,
)
from services.master.store import models


@dataclass(frozen=True)
class Placement:
    """The project a new experiment goes to, and its workspace's defaults for the config."""

    project_id: int
    workspace_id: int
    checkpoint_storage: dict[str, Any] | None
    default_compute_pool: str


_BY_NAMES = "workspace, project"


def _check_takes_experiments(project: models.Project, workspace: models.Workspace, field: str) -> None:
    if WS.DELETING in (project.state, workspace.state):
        raise FailedPrecondition(f"{field}: project {project.id} is being deleted")
    # Determined's texts: by the config's names, which of the two is archived; by id, the project's.
    by_names = field == _BY_NAMES
    if by_names and workspace.archived:
        raise FailedPrecondition(f"{field}: workspace is archived and cannot add new experiments")
    if by_names and project.archived:
        raise FailedPrecondition(f"{field}: project is archived and cannot add new experiments")
    if project.archived or workspace.archived:
        raise FailedPrecondition(
            f"{field}: project ({project.id}) is archived and cannot add new experiments."
        )


def _config_keys(config: Mapping[str, Any] | None, template: Mapping[str, Any] | None) -> tuple[str, str]:
    """The `workspace` and `project` keys of the config merged over its template ("" where absent;
    the config's own keys win). A config that does not parse (None) names neither: creating the
    experiment reports what is wrong with it."""
    merged = {**(template or {}), **(config or {})}
    workspace, project = merged.get("workspace"), merged.get("project")
    return (workspace if isinstance(workspace, str) else ""), (project if isinstance(project, str) else "")


def parsed_or_none(config_text: str) -> dict[str, Any] | None:
    """The config mapping `config_text` holds, None when it does not parse (its creation says why)."""
    try:
        return parse_config_text(config_text)
    except ConfigError:
        return None


def placement(
    ctx: MasterContext,
    project_id: int,
    config: Mapping[str, Any] | None,
    template: Mapping[str, Any] | None = None,
) -> Placement:
    """The project a new experiment goes to, as Determined decides it: the request's project id,
    else the project the keys `workspace` and `project` of `config` (the parsed config, None where
    it does not parse: parsed_or_none) name (both or neither), else the "Uncategorized" project. It
    must take new experiments."""
    workspace_name, project_name = _config_keys(config, template)
    with ctx.db.read() as s:
        if project_id:
            field = "project_id"
            if project_id < 0:
                raise InvalidArgument(f"project_id: must be a project id (got {project_id})")
        elif workspace_name or project_name:
            field = _BY_NAMES
            if not (workspace_name and project_name):
                raise InvalidArgument(
                    "workspace, project: the config must name both the workspace and the project, or neither"
                )
            found = project_id_by_names(s, workspace_name, project_name)
            if found is None:
                raise NotFound(
                    f"workspace, project: no project {project_name!r} in workspace {workspace_name!r}"
                )
            project_id = found
        else:
            field = "project_id"
            project_id = models.UNCATEGORIZED_PROJECT_ID
        rows = project_with_workspace(s, project_id)
        if rows is None:
            raise NotFound(f"{field}: project {project_id} not found")
        project, workspace = rows
        _check_takes_experiments(project, workspace, field)
        return Placement(
            project_id=project.id,
            workspace_id=workspace.id,
            checkpoint_storage=workspace.checkpoint_storage or None,
            default_compute_pool=workspace.default_compute_pool,
        )


def check_may_create_in(s: Session, principal: Principal, project: models.Project, field: str) -> None:
    """Not found unless the caller may see the project; refused unless they may create
    experiments in its workspace."""
    what = f"{field}: project {project.id}"
    access.check_readable(principal, Permission.VIEW_PROJECT, project.workspace_id, what, s)
    access.check(
        principal,
        Permission.CREATE_EXPERIMENT,
        project.workspace_id,
        f"create experiments in project {project.id}",
        s,
    )


def check_still_takes_experiments(w: Work, project_id: int) -> None:
    """Inside the unit of work that stores a new experiment: its project did not go away or get
    archived since the experiment was placed."""
    project, workspace = load_project(w, project_id, field="project_id")
    _check_takes_experiments(project, workspace, "project_id")


def move_experiment(
    ctx: MasterContext, w: Work, principal: Principal, experiment_id: int, destination_project_id: int
) -> None:
    exp = load_experiment(w, experiment_id)
    check_can_modify(w.session, principal, exp)
    if exp.archived:
        raise FailedPrecondition(f"experiment {exp.id} is archived: unarchive it before moving it")
    source, source_workspace = load_project(w, exp.project_id, field="experimentId")
    if source.archived or source_workspace.archived:
        raise FailedPrecondition(
            f"experiment {exp.id} is in archived project {source.id}: experiments cannot move out of it"
        )
    check_not_deleting("project", source)
    destination, destination_workspace = load_project(w, destination_project_id, field="destinationProjectId")
    check_may_create_in(w.session, principal, destination, "destinationProjectId")
    _check_takes_experiments(destination, destination_workspace, "destinationProjectId")
    if exp.project_id == destination.id:
        return
    exp.project_id = destination.id
    # The experiment's trial tasks carry its place too (task listings filter by it): they move with it.
    w.session.execute(
        update(models.Task)
        .where(models.Task.experiment_id == exp.id)
        .values(project_id=destination.id, workspace_id=destination.workspace_id)
    )
    topic = experiment_topic(exp.id)
    w.later(lambda: ctx.topics.publish(topic))
