"""Who holds which role where: assigning and removing roles (Determined's /api/v1/roles), and the
reads `det rbac` and `det workspace list-members` make.

Assigning or removing a role on a workspace takes ASSIGN_ROLES there (a WorkspaceAdmin gives roles
on its workspace); cluster-wide, ASSIGN_ROLES cluster-wide (ClusterAdmin). A role holding a
cluster-only permission (ClusterAdmin, WorkspaceCreator) is assigned cluster-wide only. A request
is checked whole before anything is written; one assignment already held (or, on removal, not
held) refuses the request, naming it. Every committed change moves the context's access_version,
so the grants kept for the next calls (grants.py) are computed again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.identity.roles import CLUSTER_ADMIN, WORKSPACE_ADMIN, Role, role
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import AlreadyExists, InvalidArgument, NotFound
from services.master.store import models
from services.master.store.db import Database

# Assignments in one request: bounded before any is looked up.
MAX_ASSIGNMENTS_PER_REQUEST = 1000


@dataclass(frozen=True)
class Assignment:
    """A role held by a user or a group (exactly one), on a workspace or (None) cluster-wide."""

    role_id: int
    user_id: int | None = None
    group_id: int | None = None
    workspace_id: int | None = None


@dataclass(frozen=True)
class Requested:
    """An assignment as a request names it, with the request field it came from (for errors)."""

    assignment: Assignment
    field: str


def _scope(workspace_id: int | None) -> str:
    return f"workspace {workspace_id}" if workspace_id is not None else "the cluster"


def _holder(a: Assignment) -> str:
    return f"user {a.user_id}" if a.user_id is not None else f"group {a.group_id}"


def _check_request(requested: list[Requested]) -> None:
    if len(requested) > MAX_ASSIGNMENTS_PER_REQUEST:
        raise InvalidArgument(
            f"userRoleAssignments: at most {MAX_ASSIGNMENTS_PER_REQUEST} assignments a request "
            f"(got {len(requested)})"
        )
    if not requested:
        raise InvalidArgument("userRoleAssignments: name at least one assignment (or groupRoleAssignments)")
    for r in requested:
        found: Role = role(r.assignment.role_id, f"{r.field}.roleAssignment.role.roleId")
        if found.cluster_only and r.assignment.workspace_id is not None:
            raise InvalidArgument(
                f"{r.field}.roleAssignment.scopeWorkspaceId: {found.name} is assigned cluster-wide only"
            )


def _check_exists(s: Session, requested: list[Requested]) -> None:
    for kind, column, ids_of in (
        ("user", models.User.id, lambda a: a.user_id),
        ("group", models.UserGroup.id, lambda a: a.group_id),
        ("workspace", models.Workspace.id, lambda a: a.workspace_id),
    ):
        wanted = {ids_of(r.assignment) for r in requested} - {None}
        if not wanted:
            continue
        found = set(s.scalars(select(column).where(column.in_(wanted))))
        for r in requested:
            value = ids_of(r.assignment)
            if value is not None and value not in found:
                field = {
                    "user": "userId",
                    "group": "groupId",
                    "workspace": "roleAssignment.scopeWorkspaceId",
                }[kind]
                raise NotFound(f"{r.field}.{field}: no {kind} {value}")


def _check_may_assign(s: Session, principal: Principal, requested: list[Requested], verb: str) -> None:
    for r in requested:
        a = r.assignment
        what = f"{verb} roles on {_scope(a.workspace_id)}"
        if a.workspace_id is None:
            access.check_cluster(principal, Permission.ASSIGN_ROLES, what, s)
        else:
            access.check(principal, Permission.ASSIGN_ROLES, a.workspace_id, what, s)


def _stored(s: Session, wanted: list[Requested]) -> dict[Assignment, list[int]]:
    """The stored rows (their ids) of the assignments asked about: one query over their holders'
    rows, matched here, however many are asked (up to MAX_ASSIGNMENTS_PER_REQUEST)."""
    t = models.RoleAssignment
    user_ids = {r.assignment.user_id for r in wanted if r.assignment.user_id is not None}
    group_ids = {r.assignment.group_id for r in wanted if r.assignment.group_id is not None}
    asked = {r.assignment for r in wanted}
    found: dict[Assignment, list[int]] = {}
    rows = s.execute(
        select(t.id, t.role_id, t.user_id, t.group_id, t.workspace_id).where(
            or_(t.user_id.in_(user_ids), t.group_id.in_(group_ids))
        )
    )
    for row_id, role_id, user_id, group_id, workspace_id in rows:
        key = Assignment(role_id, user_id, group_id, workspace_id)
        if key in asked:
            found.setdefault(key, []).append(row_id)
    return found


def assign(ctx: MasterContext, principal: Principal, requested: list[Requested]) -> None:
    _check_request(requested)
    distinct = list({r.assignment: r for r in requested}.values())
    with ctx.unit_of_work() as w:
        s = w.session
        _check_may_assign(s, principal, distinct, "assign")
        _check_exists(s, distinct)
        held = _stored(s, distinct)
        for r in distinct:
            if r.assignment in held:
                a = r.assignment
                raise AlreadyExists(
                    f"{r.field}: {_holder(a)} holds role {a.role_id} on {_scope(a.workspace_id)} already"
                )
        now = utcnow()
        s.add_all(
            models.RoleAssignment(
                role_id=r.assignment.role_id,
                user_id=r.assignment.user_id,
                group_id=r.assignment.group_id,
                workspace_id=r.assignment.workspace_id,
                created_at=now,
            )
            for r in distinct
        )
        w.later(ctx.access_changed)


def remove(ctx: MasterContext, principal: Principal, requested: list[Requested]) -> None:
    _check_request(requested)
    distinct = list({r.assignment: r for r in requested}.values())
    with ctx.unit_of_work() as w:
        s = w.session
        _check_may_assign(s, principal, distinct, "remove")
        held = _stored(s, distinct)
        for r in distinct:
            if r.assignment not in held:
                a = r.assignment
                raise NotFound(
                    f"{r.field}: {_holder(a)} does not hold role {a.role_id} on {_scope(a.workspace_id)}"
                )
        row_ids = [row_id for ids in held.values() for row_id in ids]
        s.execute(delete(models.RoleAssignment).where(models.RoleAssignment.id.in_(row_ids)))
        w.later(ctx.access_changed)


def give_creator_workspace_admin(s: Session, user_id: int, workspace_id: int) -> None:
    """A new workspace's creator administers it (Determined's rule), in the creating transaction;
    the caller moves the access version once it commits."""
    s.add(
        models.RoleAssignment(
            role_id=WORKSPACE_ADMIN.id, user_id=user_id, workspace_id=workspace_id, created_at=utcnow()
        )
    )


# ---- reads ------------------------------------------------------------------------------------


def _rows(s: Session, *where: ColumnElement[bool]) -> list[Assignment]:
    t = models.RoleAssignment
    q = select(t.role_id, t.user_id, t.group_id, t.workspace_id).where(*where).order_by(t.id)
    return [Assignment(r, u, g, w) for r, u, g, w in s.execute(q)]


def of_user(db: Database, user_id: int, *, with_admin_flag: bool = True) -> list[Assignment]:
    """The user's assignments, direct and through their groups; with `with_admin_flag`, an admin
    also holds ClusterAdmin cluster-wide (the admin flag is ClusterAdmin: grants.py)."""
    t = models.RoleAssignment
    with db.read() as s:
        user = s.get(models.User, user_id)
        if user is None:
            raise NotFound(f"userId: no user {user_id}")
        groups = select(models.UserGroupMember.group_id).where(models.UserGroupMember.user_id == user_id)
        found = _rows(s, or_(t.user_id == user_id, t.group_id.in_(groups)))
        admin = bool(user.admin)
    if with_admin_flag and admin and Assignment(CLUSTER_ADMIN.id, user_id=user_id) not in found:
        found.insert(0, Assignment(CLUSTER_ADMIN.id, user_id=user_id))
    return found


def of_group(db: Database, group_id: int) -> list[Assignment]:
    with db.read() as s:
        if s.get(models.UserGroup, group_id) is None:
            raise NotFound(f"groupId: no group {group_id}")
        return _rows(s, models.RoleAssignment.group_id == group_id)


def of_roles(db: Database, role_ids: Iterable[int]) -> list[Assignment]:
    with db.read() as s:
        return _rows(s, models.RoleAssignment.role_id.in_(list(role_ids)))


@dataclass(frozen=True)
class WorkspaceMembers:
    assignments: list[Assignment]
    # The holders, for naming them: group id -> its members' user ids; user ids held directly.
    group_ids: list[int]
    user_ids: list[int]


def on_workspace(db: Database, principal: Principal, workspace_id: int, name: str) -> WorkspaceMembers:
    """Who holds roles on the workspace (cluster-wide holders aside), whose name holds `name`."""
    with db.read() as s:
        if s.get(models.Workspace, workspace_id) is None or not access.may(
            principal, Permission.VIEW_WORKSPACE, workspace_id, s
        ):
            raise NotFound(f"workspaceId: no workspace {workspace_id}")
        t = models.RoleAssignment
        found = _rows(s, t.workspace_id == workspace_id)
        if name:
            pattern = f"%{name.lower()}%"
            users = set(
                s.scalars(select(models.User.id).where(func.lower(models.User.username).like(pattern)))
            )
            named_groups = set(
                s.scalars(select(models.UserGroup.id).where(func.lower(models.UserGroup.name).like(pattern)))
            )
            found = [a for a in found if a.user_id in users or a.group_id in named_groups]
    return WorkspaceMembers(
        assignments=found,
        group_ids=list(dict.fromkeys(a.group_id for a in found if a.group_id is not None)),
        user_ids=list(dict.fromkeys(a.user_id for a in found if a.user_id is not None)),
    )
