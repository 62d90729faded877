"""Workspaces and projects as the API shows them: with their owners' names and their counts of
projects, experiments and trials, listed page by page; and where each experiment lives (its
project and workspace) for the experiment listings.

Counts are aggregated over a page's ids with a fixed number of queries, never one per row. An
experiment counts as long as its row exists (also while it is being deleted), as in Determined:
`det project delete` shows the count going down.

Names are looked up without regard to case (Determined's `name` filter is an ILIKE), and an exact
`name_case_sensitive` lookup is there for clients that want it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from services.master.domain.kernel.errors import NotFound
from services.master.domain.kernel.paging import Page, page_of
from services.master.domain.kernel.states import WS, RunState
from services.master.domain.reads import visibility
from services.master.store import models


@dataclass(frozen=True)
class WorkspaceRow:
    workspace: models.Workspace
    username: str
    num_projects: int
    num_experiments: int
    # Why its deletion failed (experiments whose deletion failed), for DELETE_FAILED.
    error_message: str


@dataclass(frozen=True)
class ProjectRow:
    project: models.Project
    workspace_name: str
    # Its own flag or its workspace's: an archived workspace's projects take nothing new either.
    archived: bool
    username: str
    num_experiments: int
    num_active_experiments: int
    num_runs: int
    last_experiment_started_at: datetime | None
    error_message: str


@dataclass(frozen=True)
class ExperimentPlace:
    """Where an experiment lives, as its listing row shows it."""

    project_id: int
    project_name: str
    project_owner_id: int
    workspace_id: int
    workspace_name: str
    # The project or its workspace is archived (Determined's parentArchived).
    parent_archived: bool


@dataclass(frozen=True)
class WorkspaceFilter:
    name: str = ""
    name_case_sensitive: str = ""
    archived: bool | None = None
    users: tuple[str, ...] = ()
    user_ids: tuple[int, ...] = ()
    # The workspaces the caller may read (None: all): reads/visibility.py.
    visible: frozenset[int] | None = None


@dataclass(frozen=True)
class ProjectFilter:
    # 0: the projects of every workspace.
    workspace_id: int = 0
    name: str = ""
    archived: bool | None = None
    users: tuple[str, ...] = ()
    user_ids: tuple[int, ...] = ()
    # The workspaces the caller may read (None: all): reads/visibility.py.
    visible: frozenset[int] | None = None


WORKSPACE_SORT = {"id": models.Workspace.id, "name": models.Workspace.name}


def _usernames(s: Session, user_ids: Iterable[int | None]) -> dict[int, str]:
    wanted = {i for i in user_ids if i is not None}
    if not wanted:
        return {}
    return dict(
        s.execute(select(models.User.id, models.User.username).where(models.User.id.in_(wanted))).all()
    )


def _failed_deletions(s: Session, project_ids: list[int]) -> dict[int, list[int]]:
    """Per project, the experiments whose deletion failed."""
    failed: dict[int, list[int]] = defaultdict(list)
    if project_ids:
        for project_id, experiment_id in s.execute(
            select(models.Experiment.project_id, models.Experiment.id)
            .where(
                models.Experiment.project_id.in_(project_ids),
                models.Experiment.state == RunState.DELETE_FAILED,
            )
            .order_by(models.Experiment.id)
        ):
            failed[project_id].append(experiment_id)
    return failed


def deletion_error(state: str, failed_experiment_ids: list[int]) -> str:
    if state != WS.DELETE_FAILED:
        return ""
    if not failed_experiment_ids:
        return "deleting its experiments failed; delete it again to retry"
    listed = ", ".join(str(i) for i in failed_experiment_ids[:20])
    return f"deleting experiments {listed} failed; delete it again to retry"


# ---- workspaces ---------------------------------------------------------------------------------


def _workspace_rows(s: Session, workspaces: list[models.Workspace]) -> list[WorkspaceRow]:
    ids = [w.id for w in workspaces]
    if not ids:
        return []
    names = _usernames(s, (w.user_id for w in workspaces))
    project_counts: dict[int, int] = dict(
        s.execute(
            select(models.Project.workspace_id, func.count())
            .where(models.Project.workspace_id.in_(ids))
            .group_by(models.Project.workspace_id)
        ).all()
    )
    experiment_counts: dict[int, int] = dict(
        s.execute(
            select(models.Project.workspace_id, func.count(models.Experiment.id))
            .join(models.Experiment, models.Experiment.project_id == models.Project.id)
            .where(models.Project.workspace_id.in_(ids))
            .group_by(models.Project.workspace_id)
        ).all()
    )
    failed: dict[int, list[int]] = defaultdict(list)
    failing = [w.id for w in workspaces if w.state == WS.DELETE_FAILED]
    if failing:
        projects = dict(
            s.execute(
                select(models.Project.id, models.Project.workspace_id).where(
                    models.Project.workspace_id.in_(failing)
                )
            ).all()
        )
        for project_id, experiment_ids in _failed_deletions(s, list(projects)).items():
            failed[projects[project_id]].extend(experiment_ids)
    return [
        WorkspaceRow(
            workspace=w,
            username=names.get(w.user_id, "") if w.user_id is not None else "",
            num_projects=int(project_counts.get(w.id, 0)),
            num_experiments=int(experiment_counts.get(w.id, 0)),
            error_message=deletion_error(w.state, sorted(failed.get(w.id, []))),
        )
        for w in workspaces
    ]


def workspace_row(s: Session, workspace_id: int) -> WorkspaceRow:
    found = s.get(models.Workspace, workspace_id)
    if found is None:
        raise NotFound(f"workspace {workspace_id} not found")
    return _workspace_rows(s, [found])[0]


def _filtered_workspaces(f: WorkspaceFilter) -> Select[Any]:
    q = select(models.Workspace)
    if f.name:
        q = q.where(func.lower(models.Workspace.name) == f.name.lower())
    if f.name_case_sensitive:
        q = q.where(models.Workspace.name == f.name_case_sensitive)
    if f.archived is not None:
        q = q.where(models.Workspace.archived.is_(f.archived))
    if f.users:
        q = q.where(
            models.Workspace.user_id.in_(select(models.User.id).where(models.User.username.in_(f.users)))
        )
    if f.user_ids:
        q = q.where(models.Workspace.user_id.in_(f.user_ids))
    return q


def _page(s: Session, q: Select[Any], order: list[Any], offset: int, limit: int) -> tuple[list[Any], Page]:
    # Determined's workspace and project lists: limit 0 means all.
    total = int(s.scalar(select(func.count()).select_from(q.order_by(None).subquery())) or 0)
    page = page_of(total, offset, limit or -1)
    rows = q.order_by(*order).offset(page.start)
    if page.limit >= 0:
        rows = rows.limit(page.end - page.start)
    return list(s.scalars(rows)), page


def list_workspaces(
    s: Session, f: WorkspaceFilter, *, sort: str, descending: bool, offset: int, limit: int
) -> tuple[list[WorkspaceRow], Page]:
    column: Any = WORKSPACE_SORT.get(sort, models.Workspace.id)
    order: list[Any] = [column.desc() if descending else column.asc()]
    order.append(models.Workspace.id.desc() if descending else models.Workspace.id.asc())
    visible = visibility.in_column(_filtered_workspaces(f), models.Workspace.id, f.visible)
    found, page = _page(s, visible, order, offset, limit)
    return _workspace_rows(s, found), page


# ---- projects -----------------------------------------------------------------------------------


def _project_rows(s: Session, projects: list[models.Project]) -> list[ProjectRow]:
    ids = [p.id for p in projects]
    if not ids:
        return []
    names = _usernames(s, (p.user_id for p in projects))
    workspaces = {
        w.id: w
        for w in s.scalars(
            select(models.Workspace).where(models.Workspace.id.in_({p.workspace_id for p in projects}))
        )
    }
    counts: dict[int, tuple[int, int, datetime | None]] = {}
    for project_id, total, active, last_start in s.execute(
        select(
            models.Experiment.project_id,
            func.count(),
            func.count().filter(models.Experiment.state == RunState.ACTIVE),
            func.max(models.Experiment.start_time),
        )
        .where(models.Experiment.project_id.in_(ids))
        .group_by(models.Experiment.project_id)
    ):
        counts[project_id] = (int(total), int(active), last_start)
    runs: dict[int, int] = dict(
        s.execute(
            select(models.Experiment.project_id, func.count(models.Trial.id))
            .join(models.Trial, models.Trial.experiment_id == models.Experiment.id)
            .where(models.Experiment.project_id.in_(ids))
            .group_by(models.Experiment.project_id)
        ).all()
    )
    failed = _failed_deletions(s, [p.id for p in projects if p.state == WS.DELETE_FAILED])
    rows = []
    for p in projects:
        workspace = workspaces[p.workspace_id]
        experiments, active_experiments, last_started = counts.get(p.id) or (0, 0, None)
        rows.append(
            ProjectRow(
                project=p,
                workspace_name=workspace.name,
                archived=p.archived or workspace.archived,
                username=names.get(p.user_id, "") if p.user_id is not None else "",
                num_experiments=experiments,
                num_active_experiments=active_experiments,
                num_runs=int(runs.get(p.id, 0)),
                last_experiment_started_at=last_started,
                error_message=deletion_error(p.state, failed.get(p.id, [])),
            )
        )
    return rows


def project_row(s: Session, project_id: int) -> ProjectRow:
    found = s.get(models.Project, project_id)
    if found is None:
        raise NotFound(f"project {project_id} not found")
    return _project_rows(s, [found])[0]


def check_project_exists(s: Session, project_id: int) -> None:
    if s.scalar(select(models.Project.id).where(models.Project.id == project_id)) is None:
        raise NotFound(f"project {project_id} not found")


def _last_start() -> Any:
    return (
        select(func.max(models.Experiment.start_time))
        .where(models.Experiment.project_id == models.Project.id)
        .scalar_subquery()
    )


def _project_order(sort: str, descending: bool) -> list[Any]:
    columns: dict[str, Any] = {
        "id": models.Project.id,
        "name": models.Project.name,
        "description": models.Project.description,
        "created_at": models.Project.created_at,
        "last_experiment_started_at": _last_start(),
    }
    column = columns.get(sort, models.Project.id)
    order = [column.desc() if descending else column.asc()]
    order.append(models.Project.id.desc() if descending else models.Project.id.asc())
    return order


def list_projects(
    s: Session, f: ProjectFilter, *, sort: str, descending: bool, offset: int, limit: int
) -> tuple[list[ProjectRow], Page]:
    hidden = f.visible is not None and f.workspace_id not in f.visible
    if f.workspace_id and (s.get(models.Workspace, f.workspace_id) is None or hidden):
        raise NotFound(f"workspace {f.workspace_id} not found")
    q = visibility.in_column(select(models.Project), models.Project.workspace_id, f.visible)
    if f.workspace_id:
        q = q.where(models.Project.workspace_id == f.workspace_id)
    if f.name:
        q = q.where(func.lower(models.Project.name) == f.name.lower())
    if f.archived is not None:
        # Determined filters on the project's own flag.
        q = q.where(models.Project.archived.is_(f.archived))
    if f.users:
        q = q.where(
            models.Project.user_id.in_(select(models.User.id).where(models.User.username.in_(f.users)))
        )
    if f.user_ids:
        q = q.where(models.Project.user_id.in_(f.user_ids))
    found, page = _page(s, q, _project_order(sort, descending), offset, limit)
    return _project_rows(s, found), page


def project_id_by_names(s: Session, workspace_name: str, project_name: str) -> int | None:
    """The project a config's `workspace` and `project` keys name (exact names), if any."""
    found = s.scalar(
        select(models.Project.id)
        .join(models.Workspace, models.Workspace.id == models.Project.workspace_id)
        .where(models.Workspace.name == workspace_name, models.Project.name == project_name)
    )
    return int(found) if found is not None else None


# ---- where experiments live ---------------------------------------------------------------------


def experiment_places(s: Session, project_ids: Iterable[int]) -> dict[int, ExperimentPlace]:
    """Per project id, what an experiment in it shows of its project and workspace."""
    wanted = set(project_ids)
    if not wanted:
        return {}
    rows = s.execute(
        select(models.Project, models.Workspace)
        .join(models.Workspace, models.Workspace.id == models.Project.workspace_id)
        .where(models.Project.id.in_(wanted))
    ).all()
    return {
        project.id: ExperimentPlace(
            project_id=project.id,
            project_name=project.name,
            project_owner_id=project.user_id or 0,
            workspace_id=workspace.id,
            workspace_name=workspace.name,
            parent_archived=project.archived or workspace.archived,
        )
        for project, workspace in rows
    }
