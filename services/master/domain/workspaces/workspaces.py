"""Workspaces and projects (Determined's): creating, renaming and archiving them, their notes, keys
and defaults for their experiments, and who may change them. (Deleting them, which deletes their
experiments, is in workspace_deletion.py; which project an experiment is in, in
experiment_projects.py.)

As in Determined:
- the built-in "Uncategorized" workspace and project (id 1) are immutable: never renamed, archived,
  deleted or changed, and the workspace takes no new projects;
- an archived workspace takes no new projects, an archived project is not changed, and a project
  shows as archived when its workspace is;
- anyone may create a workspace or a project in any workspace that takes them; changing a workspace
  takes its owner or an admin, changing a project its owner, its workspace's owner or an admin.
Unlike Determined, names are unique without regard to case (workspaces in the cluster, projects in
their workspace): Determined's clients look them up case-insensitively and take the first match.

Every request is checked whole before anything is written, so a refused request changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.config import validate_config
from services.master.domain.identity import access, agent_users, role_assignments
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from services.master.domain.kernel.states import WS
from services.master.domain.workspaces import pool_bindings, project_keys
from services.master.store import models

MAX_NAME_CHARS = 80
MAX_DESCRIPTION_CHARS = 16_384
MAX_NOTES = 100
MAX_NOTE_NAME_CHARS = 255
MAX_NOTES_TOTAL_CHARS = 1_048_576
MAX_STORAGE_JSON_CHARS = 65_536

# A config that passes the schema but for its checkpoint_storage: a workspace's storage is checked
# by the same schema as an experiment's.
_STORAGE_PROBE: dict[str, Any] = {
    "entrypoint": "true",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
}


@dataclass(frozen=True)
class WorkspaceSettings:
    """A workspace's defaults for its experiments and tasks; None leaves a setting as it is. An empty
    storage or pool name removes the setting, an agent user group with no field set removes the
    link (admins only, as in Determined). The last says whether the request set something Cairn has
    no use for (Kubernetes namespaces): such a request is refused."""

    checkpoint_storage: dict[str, Any] | None = None
    default_compute_pool: str | None = None
    default_aux_pool: str | None = None
    agent_user_group: agent_users.AgentUserGroupRequest | None = None
    kubernetes_namespaces: bool = False


@dataclass(frozen=True)
class ProjectEdit:
    """What to change about a project; None leaves a field as it is."""

    name: str | None = None
    description: str | None = None
    key: str | None = None


# ---- checks -------------------------------------------------------------------------------------


def checked_name(value: str, field: str = "name") -> str:
    if not value.strip():
        raise InvalidArgument(f"{field}: must not be empty")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidArgument(f"{field}: at most {MAX_NAME_CHARS} characters (got {len(value)})")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidArgument(f"{field}: must not contain control characters")
    return value


def _checked_description(value: str | None, field: str = "description") -> str | None:
    if value is not None and len(value) > MAX_DESCRIPTION_CHARS:
        raise InvalidArgument(f"{field}: at most {MAX_DESCRIPTION_CHARS} characters (got {len(value)})")
    return value


def _checked_storage(value: dict[str, Any] | None, field: str) -> dict[str, Any] | None:
    if value is None or not value:
        return value
    if len(json.dumps(value)) > MAX_STORAGE_JSON_CHARS:
        raise InvalidArgument(f"{field}: at most {MAX_STORAGE_JSON_CHARS} characters of JSON")
    problems = [
        p.replace("checkpoint_storage", field, 1)
        for p in validate_config({**_STORAGE_PROBE, "checkpoint_storage": value})
        if p.startswith("checkpoint_storage")
    ]
    if problems:
        raise InvalidArgument("; ".join(problems))
    return value


def _checked_pool(ctx: MasterContext, value: str | None, field: str) -> str | None:
    if value:
        names = [p.name for p in ctx.settings.pools]
        if value not in names:
            raise InvalidArgument(f"{field}: no resource pool {value!r} (pools: {', '.join(names)})")
    return value


def _checked_agent_user_group(
    ctx: MasterContext,
    s: Session,
    principal: Principal,
    settings: WorkspaceSettings,
    workspace_id: int | None,
) -> agent_users.AgentUserGroup | None:
    """The link the request asks for; None: none (not asked, or asked to remove it)."""
    if settings.agent_user_group is None:
        return None
    access.check(
        principal,
        Permission.SET_WORKSPACE_AGENT_USER_GROUP,
        workspace_id,
        "set a workspace's agent user group",
        s,
    )
    return agent_users.checked(
        settings.agent_user_group, "agentUserGroup", allow_root=ctx.settings.allow_root_agent_user
    )


def _check_supported(settings: WorkspaceSettings) -> None:
    if settings.kubernetes_namespaces:
        raise InvalidArgument(
            "clusterNamespaceMeta: Cairn has no Kubernetes resource manager; namespace bindings and "
            "quotas are not supported"
        )


def check_can_manage_workspace(
    s: Session,
    principal: Principal,
    workspace: models.Workspace,
    verb: str,
    permission: Permission = Permission.UPDATE_WORKSPACE,
) -> None:
    """Not found unless the caller may see the workspace; refused unless they may do
    `permission` to it (its owner administers it: identity/access.py)."""
    access.check_object(
        s,
        principal,
        permission,
        workspace.id,
        [workspace.user_id],
        f"workspace {workspace.id}",
        view=Permission.VIEW_WORKSPACE,
        verb=verb,
    )


def check_can_manage_project(
    s: Session,
    principal: Principal,
    project: models.Project,
    workspace: models.Workspace,
    verb: str,
    permission: Permission = Permission.UPDATE_PROJECT,
) -> None:
    """As check_can_manage_workspace, for a project (its workspace's admins change any of it)."""
    access.check_object(
        s,
        principal,
        permission,
        workspace.id,
        [project.user_id],
        f"project {project.id}",
        view=Permission.VIEW_PROJECT,
        verb=verb,
    )


def check_not_deleting(kind: str, row: models.Workspace | models.Project) -> None:
    if row.state == WS.DELETING:
        raise FailedPrecondition(f"{kind} {row.id} is being deleted")


def load_workspace(w: Work, workspace_id: int, field: str = "id") -> models.Workspace:
    found = w.session.get(models.Workspace, workspace_id)
    if found is None:
        raise NotFound(f"{field}: workspace {workspace_id} not found")
    return found


# A project with its workspace, in one read (every experiment's creation reads them).
_PROJECT_WITH_WORKSPACE = (
    select(models.Project, models.Workspace)
    .join(models.Workspace, models.Workspace.id == models.Project.workspace_id)
    .where(models.Project.id == bindparam("project_id"))
)


def project_with_workspace(s: Session, project_id: int) -> tuple[models.Project, models.Workspace] | None:
    """The project and its workspace (None when there is no such project), in one read."""
    found = s.execute(_PROJECT_WITH_WORKSPACE, {"project_id": project_id}).first()
    return None if found is None else (found[0], found[1])


def load_project(w: Work, project_id: int, field: str = "id") -> tuple[models.Project, models.Workspace]:
    found = project_with_workspace(w.session, project_id)
    if found is None:
        raise NotFound(f"{field}: project {project_id} not found")
    return found


def _check_workspace_name_free(s: Session, name: str, except_id: int | None = None) -> None:
    query = select(models.Workspace.name).where(func.lower(models.Workspace.name) == name.lower())
    if except_id is not None:
        query = query.where(models.Workspace.id != except_id)
    existing = s.scalar(query)
    if existing is not None:
        raise AlreadyExists(f"name: a workspace named {existing!r} already exists")


def _check_project_name_free(s: Session, workspace_id: int, name: str, except_id: int | None = None) -> None:
    query = select(models.Project.name).where(
        models.Project.workspace_id == workspace_id, func.lower(models.Project.name) == name.lower()
    )
    if except_id is not None:
        query = query.where(models.Project.id != except_id)
    existing = s.scalar(query)
    if existing is not None:
        raise AlreadyExists(f"name: workspace {workspace_id} already has a project named {existing!r}")


def _key_taken(s: Session, key: str, except_id: int | None = None) -> bool:
    query = select(models.Project.id).where(models.Project.key == key)
    if except_id is not None:
        query = query.where(models.Project.id != except_id)
    return s.scalar(query) is not None


# ---- the built-ins ------------------------------------------------------------------------------


def ensure_builtin_owner(ctx: MasterContext) -> None:
    """Give the built-in workspace and project to the first admin. Migration 0006 does it where an
    admin exists already; on a fresh database the built-in users come later (ensure_builtin_users),
    so the master calls this right after creating them."""
    with ctx.unit_of_work() as w:
        admin_id = w.session.scalar(select(func.min(models.User.id)).where(models.User.admin.is_(True)))
        if admin_id is None:
            return
        for table in (models.Workspace, models.Project):
            w.session.execute(
                update(table)
                .where(table.immutable.is_(True), table.user_id.is_(None))
                .values(user_id=admin_id)
            )


# ---- workspaces ---------------------------------------------------------------------------------


def create_workspace(
    ctx: MasterContext, w: Work, principal: Principal, name: str, settings: WorkspaceSettings
) -> int:
    access.check_cluster(principal, Permission.CREATE_WORKSPACE, "create a workspace", w.session)
    name = checked_name(name)
    _check_supported(settings)
    storage = _checked_storage(settings.checkpoint_storage, "checkpointStorageConfig")
    compute = _checked_pool(ctx, settings.default_compute_pool, "defaultComputePool")
    aux = _checked_pool(ctx, settings.default_aux_pool, "defaultAuxPool")
    link = _checked_agent_user_group(ctx, w.session, principal, settings, None)
    _check_workspace_name_free(w.session, name)
    workspace = models.Workspace(
        name=name,
        user_id=principal.user_id,
        archived=False,
        immutable=False,
        state="",
        default_compute_pool=compute or "",
        default_aux_pool=aux or "",
        checkpoint_storage=storage or None,
        created_at=utcnow(),
    )
    agent_users.store(workspace, link)
    w.session.add(workspace)
    w.session.flush()
    _check_default_pools_open(w, workspace.id, compute, aux)
    if principal.user_id is not None:
        # Determined's rule: a workspace's creator administers it.
        role_assignments.give_creator_workspace_admin(w.session, principal.user_id, workspace.id)
        w.later(ctx.access_changed)
    return workspace.id


def _check_default_pools_open(w: Work, workspace_id: int, compute: str | None, aux: str | None) -> None:
    """A workspace's default pools must be open to its work (bound to it, or to none)."""
    if compute:
        pool_bindings.check_available(w.session, compute, workspace_id, "defaultComputePool")
    if aux:
        pool_bindings.check_available(w.session, aux, workspace_id, "defaultAuxPool")


def patch_workspace(
    ctx: MasterContext,
    w: Work,
    principal: Principal,
    workspace_id: int,
    name: str | None,
    settings: WorkspaceSettings,
) -> None:
    workspace = load_workspace(w, workspace_id)
    check_can_manage_workspace(w.session, principal, workspace, "change")
    for asked, permission in (
        (settings.checkpoint_storage is not None, Permission.SET_WORKSPACE_CHECKPOINT_STORAGE_CONFIG),
        (
            settings.default_compute_pool is not None or settings.default_aux_pool is not None,
            Permission.SET_WORKSPACE_DEFAULT_RESOURCE_POOL,
        ),
    ):
        if asked:
            check_can_manage_workspace(w.session, principal, workspace, "change", permission)
    if workspace.immutable:
        raise FailedPrecondition(
            f"workspace {workspace.id} ({workspace.name}) is built in: it cannot be changed"
        )
    if workspace.archived:
        raise FailedPrecondition(f"workspace {workspace.id} is archived: unarchive it to change it")
    check_not_deleting("workspace", workspace)
    if name is not None:
        name = checked_name(name)
        _check_workspace_name_free(w.session, name, except_id=workspace.id)
    _check_supported(settings)
    storage = _checked_storage(settings.checkpoint_storage, "checkpointStorageConfig")
    compute = _checked_pool(ctx, settings.default_compute_pool, "defaultComputePool")
    aux = _checked_pool(ctx, settings.default_aux_pool, "defaultAuxPool")
    link = _checked_agent_user_group(ctx, w.session, principal, settings, workspace.id)
    _check_default_pools_open(w, workspace.id, compute, aux)
    if name is not None:
        workspace.name = name
    if settings.agent_user_group is not None:
        agent_users.store(workspace, link)
    if storage is not None:
        workspace.checkpoint_storage = storage or None
    if compute is not None:
        workspace.default_compute_pool = compute
    if aux is not None:
        workspace.default_aux_pool = aux


def set_workspace_archived(w: Work, principal: Principal, workspace_id: int, archived: bool) -> None:
    workspace = load_workspace(w, workspace_id)
    verb = "archive" if archived else "unarchive"
    check_can_manage_workspace(w.session, principal, workspace, verb)
    if workspace.immutable:
        raise FailedPrecondition(
            f"workspace {workspace.id} ({workspace.name}) is built in: it cannot be {verb}d"
        )
    check_not_deleting("workspace", workspace)
    workspace.archived = archived


# ---- projects -----------------------------------------------------------------------------------


def create_project(
    w: Work,
    principal: Principal,
    workspace_id: int,
    name: str,
    description: str | None,
    key: str | None,
) -> int:
    workspace = load_workspace(w, workspace_id, field="workspaceId")
    what = f"workspaceId: workspace {workspace.id}"
    access.check_readable(principal, Permission.VIEW_WORKSPACE, workspace.id, what, w.session)
    access.check(
        principal,
        Permission.CREATE_PROJECT,
        workspace.id,
        f"create projects in workspace {workspace.id}",
        w.session,
    )
    if workspace.immutable:
        raise FailedPrecondition(
            f"workspaceId: workspace {workspace.id} ({workspace.name}) is built in: it takes no new projects"
        )
    if workspace.archived:
        raise FailedPrecondition(
            f"workspaceId: workspace {workspace.id} is archived and takes no new projects"
        )
    check_not_deleting("workspace", workspace)
    name = checked_name(name)
    description = _checked_description(description)
    if key is not None:
        key = project_keys.checked_key(key)
    _check_project_name_free(w.session, workspace.id, name)
    if key is None:
        key = project_keys.generated_key(name, lambda candidate: _key_taken(w.session, candidate))
    elif _key_taken(w.session, key):
        raise AlreadyExists(f"key: project key {key} is already in use")
    project = models.Project(
        workspace_id=workspace.id,
        name=name,
        key=key,
        description=description or "",
        notes=[],
        user_id=principal.user_id,
        archived=False,
        immutable=False,
        state="",
        created_at=utcnow(),
    )
    w.session.add(project)
    w.session.flush()
    return project.id


def _check_editable(project: models.Project, workspace: models.Workspace) -> None:
    if project.immutable:
        raise FailedPrecondition(f"project {project.id} ({project.name}) is built in: it cannot be changed")
    if project.archived or workspace.archived:
        raise FailedPrecondition(f"project {project.id} is archived: unarchive it to change it")
    check_not_deleting("project", project)


def patch_project(w: Work, principal: Principal, project_id: int, edit: ProjectEdit) -> None:
    project, workspace = load_project(w, project_id)
    check_can_manage_project(w.session, principal, project, workspace, "change")
    _check_editable(project, workspace)
    name = checked_name(edit.name) if edit.name is not None else None
    description = _checked_description(edit.description)
    key = project_keys.checked_key(edit.key) if edit.key is not None else None
    if name is not None:
        _check_project_name_free(w.session, workspace.id, name, except_id=project.id)
    if key is not None and _key_taken(w.session, key, except_id=project.id):
        raise AlreadyExists(f"key: project key {key} is already in use")
    if name is not None:
        project.name = name
    if description is not None:
        project.description = description
    if key is not None:
        project.key = key


def put_project_notes(
    w: Work, principal: Principal, project_id: int, notes: list[tuple[str, str]]
) -> list[dict[str, str]]:
    """Replace the project's notes (Determined's PutProjectNotes); the notes as stored. Whoever
    may update projects in its workspace may, whoever owns it (as Determined's CanSetProjectNotes:
    notes are the project's shared page)."""
    project, _workspace = load_project(w, project_id, field="projectId")
    what = f"projectId: project {project.id}"
    access.check_readable(principal, Permission.VIEW_PROJECT, project.workspace_id, what, w.session)
    access.check(
        principal,
        Permission.UPDATE_PROJECT,
        project.workspace_id,
        f"write the notes of project {project.id}",
        w.session,
    )
    check_not_deleting("project", project)
    if len(notes) > MAX_NOTES:
        raise InvalidArgument(f"notes: at most {MAX_NOTES} notes (got {len(notes)})")
    total = 0
    for index, (name, contents) in enumerate(notes):
        if len(name) > MAX_NOTE_NAME_CHARS:
            raise InvalidArgument(f"notes[{index}].name: at most {MAX_NOTE_NAME_CHARS} characters")
        total += len(name) + len(contents)
    if total > MAX_NOTES_TOTAL_CHARS:
        raise InvalidArgument(f"notes: at most {MAX_NOTES_TOTAL_CHARS} characters in all (got {total})")
    project.notes = [{"name": name, "contents": contents} for name, contents in notes]
    return list(project.notes)


def add_project_note(
    w: Work, principal: Principal, project_id: int, name: str, contents: str
) -> list[dict[str, str]]:
    """Append one note to the project's notes (Determined's AddProjectNote), within the same
    bounds as a replacement; the notes as stored."""
    project, _workspace = load_project(w, project_id, field="projectId")
    existing = [(n["name"], n["contents"]) for n in (project.notes or [])]
    return put_project_notes(w, principal, project_id, [*existing, (name, contents)])


def set_project_archived(w: Work, principal: Principal, project_id: int, archived: bool) -> None:
    project, workspace = load_project(w, project_id)
    verb = "archive" if archived else "unarchive"
    # Who may comes first, as on Determined: a user who may not gets 403 even for a built-in.
    check_can_manage_project(w.session, principal, project, workspace, verb)
    if project.immutable:
        raise FailedPrecondition(f"project {project.id} ({project.name}) is built in: it cannot be {verb}d")
    if workspace.archived:
        raise FailedPrecondition(
            f"project {project.id} is in archived workspace {workspace.id}: unarchive the workspace first"
        )
    check_not_deleting("project", project)
    project.archived = archived
