"""Roles (Determined's /api/v1/roles and /api/v1/permissions/summary): the built-in roles, who
holds them where, assigning and removing them. The caller, the message, then
domain/identity/role_assignments.py."""

from __future__ import annotations

from collections.abc import Iterable

import grpc

from cairn.api.v1 import rbac_pb2
from services.master.domain.identity import groups, role_assignments, users
from services.master.domain.identity.permissions import CLUSTER_ONLY, NAMES, SHOWN
from services.master.domain.identity.role_assignments import Assignment, Requested
from services.master.domain.identity.roles import BY_ID, ROLES, Role
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.paging import page_of
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.api.groups import group_details
from services.master.servicers.errors import rpc


def role_pb(role: Role, *, with_permissions: bool = True) -> rbac_pb2.Role:
    return rbac_pb2.Role(
        role_id=role.id,
        name=role.name,
        permissions=[
            rbac_pb2.Permission(
                id=rbac_pb2.PermissionType.ValueType(int(p)),
                name=NAMES[p],
                scope_type_mask=rbac_pb2.ScopeTypeMask(cluster=True, workspace=p not in CLUSTER_ONLY),
            )
            for p in SHOWN
            if p in role.permissions
        ]
        if with_permissions
        else [],
        scope_type_mask=rbac_pb2.ScopeTypeMask(cluster=True, workspace=not role.cluster_only),
    )


def _role_assignment(a: Assignment) -> rbac_pb2.RoleAssignment:
    out = rbac_pb2.RoleAssignment(
        role=role_pb(BY_ID[a.role_id], with_permissions=False), scope_cluster=a.workspace_id is None
    )
    if a.workspace_id is not None:
        out.scope_workspace_id = a.workspace_id
    return out


def with_assignments(
    found: Iterable[Assignment], role_ids: Iterable[int] = ()
) -> list[rbac_pb2.RoleWithAssignments]:
    """One entry per role (those of `found`, and `role_ids` even when nobody holds them)."""
    by_role: dict[int, rbac_pb2.RoleWithAssignments] = {
        rid: rbac_pb2.RoleWithAssignments(role=role_pb(BY_ID[rid])) for rid in role_ids
    }
    for a in found:
        if a.role_id not in BY_ID:
            continue
        entry = by_role.setdefault(a.role_id, rbac_pb2.RoleWithAssignments(role=role_pb(BY_ID[a.role_id])))
        if a.user_id is not None:
            entry.user_role_assignments.add(user_id=a.user_id, role_assignment=_role_assignment(a))
        else:
            entry.group_role_assignments.add(group_id=a.group_id or 0, role_assignment=_role_assignment(a))
    return list(by_role.values())


def summaries(
    found: Iterable[Assignment],
) -> tuple[list[rbac_pb2.Role], list[rbac_pb2.RoleAssignmentSummary]]:
    """Each role held, and where: cluster-wide and on which workspaces."""
    by_role: dict[int, rbac_pb2.RoleAssignmentSummary] = {}
    for a in found:
        if a.role_id not in BY_ID:
            continue
        summary = by_role.setdefault(a.role_id, rbac_pb2.RoleAssignmentSummary(role_id=a.role_id))
        if a.workspace_id is None:
            summary.scope_cluster = True
        elif a.workspace_id not in summary.scope_workspace_ids:
            summary.scope_workspace_ids.append(a.workspace_id)
    return [role_pb(BY_ID[rid]) for rid in by_role], list(by_role.values())


def _scope(scope: rbac_pb2.RoleAssignment, where: str) -> int | None:
    """The workspace an assignment names (None: cluster-wide)."""
    workspace_id = scope.scope_workspace_id if scope.HasField("scope_workspace_id") else None
    if workspace_id is not None and scope.scope_cluster:
        raise InvalidArgument(f"{where}.roleAssignment: scopeCluster and scopeWorkspaceId name two scopes")
    return workspace_id


def _requested(
    user_assignments: Iterable[rbac_pb2.UserRoleAssignment],
    group_assignments: Iterable[rbac_pb2.GroupRoleAssignment],
) -> list[Requested]:
    out: list[Requested] = []
    for index, u in enumerate(user_assignments):
        where = f"userRoleAssignments[{index}]"
        scope = u.role_assignment
        assignment = Assignment(scope.role.role_id, user_id=u.user_id, workspace_id=_scope(scope, where))
        out.append(Requested(assignment, where))
    for index, g in enumerate(group_assignments):
        where = f"groupRoleAssignments[{index}]"
        scope = g.role_assignment
        assignment = Assignment(scope.role.role_id, group_id=g.group_id, workspace_id=_scope(scope, where))
        out.append(Requested(assignment, where))
    return out


class RolesApi(ServicerBase):
    @rpc
    def GetPermissionsSummary(
        self, request: rbac_pb2.GetPermissionsSummaryRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.GetPermissionsSummaryResponse:
        principal = self.user(context)
        assert principal.user_id is not None
        roles, assignments = summaries(role_assignments.of_user(self.ctx.db, principal.user_id))
        return rbac_pb2.GetPermissionsSummaryResponse(roles=roles, assignments=assignments)

    @rpc
    def ListRoles(
        self, request: rbac_pb2.ListRolesRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.ListRolesResponse:
        self.user(context)
        page = page_of(len(ROLES), request.offset, request.limit)
        return rbac_pb2.ListRolesResponse(
            roles=[role_pb(r) for r in ROLES[page.start : page.end]], pagination=convert.pagination(page)
        )

    @rpc
    def SearchRolesAssignableToScope(
        self, request: rbac_pb2.SearchRolesAssignableToScopeRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.SearchRolesAssignableToScopeResponse:
        self.user(context)
        on_workspace = request.HasField("workspace_id")
        fitting = [r for r in ROLES if not (on_workspace and r.cluster_only)]
        page = page_of(len(fitting), request.offset, request.limit)
        return rbac_pb2.SearchRolesAssignableToScopeResponse(
            roles=[role_pb(r) for r in fitting[page.start : page.end]], pagination=convert.pagination(page)
        )

    @rpc
    def GetRolesByID(
        self, request: rbac_pb2.GetRolesByIDRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.GetRolesByIDResponse:
        self.user(context)
        ids = list(dict.fromkeys(request.role_ids))
        for index, role_id in enumerate(request.role_ids):
            if role_id not in BY_ID:
                raise InvalidArgument(f"roleIds[{index}]: no role {role_id}")
        found = role_assignments.of_roles(self.ctx.db, ids)
        return rbac_pb2.GetRolesByIDResponse(roles=with_assignments(found, ids))

    @rpc
    def GetRolesAssignedToUser(
        self, request: rbac_pb2.GetRolesAssignedToUserRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.GetRolesAssignedToUserResponse:
        self.user(context)
        found = role_assignments.of_user(self.ctx.db, request.user_id)
        return rbac_pb2.GetRolesAssignedToUserResponse(roles=with_assignments(found))

    @rpc
    def GetRolesAssignedToGroup(
        self, request: rbac_pb2.GetRolesAssignedToGroupRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.GetRolesAssignedToGroupResponse:
        self.user(context)
        roles, assignments = summaries(role_assignments.of_group(self.ctx.db, request.group_id))
        return rbac_pb2.GetRolesAssignedToGroupResponse(roles=roles, assignments=assignments)

    @rpc
    def GetGroupsAndUsersAssignedToWorkspace(
        self, request: rbac_pb2.GetGroupsAndUsersAssignedToWorkspaceRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.GetGroupsAndUsersAssignedToWorkspaceResponse:
        members = role_assignments.on_workspace(
            self.ctx.db, self.user(context), request.workspace_id, request.name
        )
        return rbac_pb2.GetGroupsAndUsersAssignedToWorkspaceResponse(
            groups=[group_details(g) for g in groups.get_many(self.ctx.db, list(members.group_ids))],
            users_assigned_directly=[convert.user(u) for u in users.get_many(self.ctx.db, members.user_ids)],
            assignments=with_assignments(members.assignments),
        )

    @rpc
    def AssignRoles(
        self, request: rbac_pb2.AssignRolesRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.AssignRolesResponse:
        principal = self.user(context)
        wanted = _requested(request.user_role_assignments, request.group_role_assignments)
        role_assignments.assign(self.ctx, principal, wanted)
        return rbac_pb2.AssignRolesResponse()

    @rpc
    def RemoveAssignments(
        self, request: rbac_pb2.RemoveAssignmentsRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.RemoveAssignmentsResponse:
        principal = self.user(context)
        wanted = _requested(request.user_role_assignments, request.group_role_assignments)
        role_assignments.remove(self.ctx, principal, wanted)
        return rbac_pb2.RemoveAssignmentsResponse()
