"""The built-in roles, with Determined's ids, names and permissions (its migrations' role tables,
as of 0.38), and what each is for. Roles are data here, not rows: Cairn has no custom roles
(Determined's UPDATE_ROLES), so a role's meaning cannot drift between clusters.

One Cairn rule on top (permissions.CHANGE_OTHERS): a role changes or deletes another user's
experiments, tasks, models, projects, templates and workspaces only if it holds CHANGE_OTHERS on
the scope. WorkspaceAdmin and ClusterAdmin do; Editor and EditorRestricted change what their
holder owns, which is the rule every user had before roles existed (README "Roles").
"""

from __future__ import annotations

from dataclasses import dataclass

from services.master.domain.identity.permissions import CLUSTER_ONLY, Permission
from services.master.domain.kernel.errors import InvalidArgument

P = Permission


@dataclass(frozen=True)
class Role:
    id: int
    name: str
    permissions: frozenset[Permission]
    # What the role is for, in a line (README's table).
    purpose: str

    @property
    def cluster_only(self) -> bool:
        """A role holding a cluster-only permission is assigned cluster-wide only (Determined)."""
        return bool(self.permissions & CLUSTER_ONLY)


_VIEW = frozenset(
    {
        P.VIEW_EXPERIMENT_ARTIFACTS,
        P.VIEW_EXPERIMENT_METADATA,
        P.VIEW_WORKSPACE,
        P.VIEW_PROJECT,
        P.VIEW_NSC,
        P.VIEW_MODEL_REGISTRY,
        P.VIEW_TEMPLATES,
        P.VIEW_WEBHOOKS,
        P.VIEW_WORKSPACE_CONFIG_POLICIES,
        P.VIEW_GLOBAL_CONFIG_POLICIES,
    }
)
_EDIT_RESTRICTED = _VIEW | frozenset(
    {
        P.CREATE_EXPERIMENT,
        P.UPDATE_EXPERIMENT,
        P.UPDATE_EXPERIMENT_METADATA,
        P.DELETE_EXPERIMENT,
        P.UPDATE_WORKSPACE,
        P.CREATE_PROJECT,
        P.UPDATE_PROJECT,
        P.DELETE_PROJECT,
        P.CREATE_MODEL_REGISTRY,
        P.EDIT_MODEL_REGISTRY,
        P.DELETE_MODEL_REGISTRY,
        P.DELETE_MODEL_VERSION,
        P.CREATE_TEMPLATES,
        P.UPDATE_TEMPLATES,
        P.DELETE_TEMPLATES,
        P.EDIT_WEBHOOKS,
    }
)
_EDIT = _EDIT_RESTRICTED | frozenset({P.CREATE_NSC, P.UPDATE_NSC})
_WORKSPACE_ADMIN = _EDIT | frozenset(
    {
        P.DELETE_WORKSPACE,
        P.SET_WORKSPACE_CHECKPOINT_STORAGE_CONFIG,
        P.SET_WORKSPACE_DEFAULT_RESOURCE_POOL,
        P.ASSIGN_ROLES,
        P.DELETE_OTHER_USER_MODEL_REGISTRY,
        P.DELETE_OTHER_USER_MODEL_VERSION,
        P.MODIFY_WORKSPACE_CONFIG_POLICIES,
        P.VIEW_RESOURCE_QUOTAS,
        P.CHANGE_OTHERS,
    }
)

CLUSTER_ADMIN = Role(1, "ClusterAdmin", frozenset(Permission), "everything, cluster-wide")
WORKSPACE_ADMIN = Role(
    2, "WorkspaceAdmin", _WORKSPACE_ADMIN, "a workspace's owner: all of Editor, others' objects, roles"
)
WORKSPACE_CREATOR = Role(
    3,
    "WorkspaceCreator",
    frozenset({P.CREATE_WORKSPACE, P.VIEW_GLOBAL_CONFIG_POLICIES}),
    "create workspaces (and administer those one creates)",
)
VIEWER = Role(4, "Viewer", _VIEW, "read everything in the scope")
EDITOR = Role(5, "Editor", _EDIT, "create and read in the scope, change what one owns")
EDITOR_RESTRICTED = Role(
    7, "EditorRestricted", _EDIT_RESTRICTED, "Editor without notebooks, shells and commands"
)

ROLES: tuple[Role, ...] = (
    CLUSTER_ADMIN,
    WORKSPACE_ADMIN,
    WORKSPACE_CREATOR,
    VIEWER,
    EDITOR,
    EDITOR_RESTRICTED,
)
BY_ID: dict[int, Role] = {r.id: r for r in ROLES}
BY_NAME: dict[str, Role] = {r.name: r for r in ROLES}


def role(role_id: int, field: str = "roleId") -> Role:
    """The built-in role of this id, or InvalidArgument naming the field."""
    found = BY_ID.get(role_id)
    if found is None:
        known = ", ".join(f"{r.id} ({r.name})" for r in ROLES)
        raise InvalidArgument(f"{field}: no role {role_id} (roles: {known})")
    return found
