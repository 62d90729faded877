"""Groups and roles with the stock client (determined==0.38.1): `det user-group` and `det rbac`
against a real cluster, each command judged by the state it leaves, read back over Cairn's own
API (det exits 0 after many failures)."""

from __future__ import annotations

from collections.abc import Callable

from cairn.api.v1 import auth_pb2, rbac_pb2, workspace_pb2
from tests.support.cluster import AuthedStub, TestCluster


def groups_of(api: AuthedStub) -> dict[str, list[str]]:
    """Every group, by name, with its members' usernames."""
    found = api.GetGroups(rbac_pb2.GetGroupsRequest(limit=-1), timeout=30).groups
    return {
        g.group.name: sorted(
            u.username for u in api.GetGroup(rbac_pb2.GetGroupRequest(group_id=g.group.group_id)).group.users
        )
        for g in found
    }


def test_user_groups_with_the_stock_det(
    cluster: TestCluster, det_admin: Callable[..., str], det: Callable[..., str]
) -> None:
    api = cluster.login("admin")
    det_admin("user", "create", "alice", "--password", "Alice-pass1")
    det_admin("user", "create", "bob", "--password", "Bob-pass12")

    out = det_admin("user-group", "create", "team", "--add-user", "alice")
    assert "user group with name team" in out and "alice was added to the group" in out
    det_admin("user-group", "add-user", "team", "bob,determined")
    det_admin("user-group", "remove-user", "team", "alice")
    det_admin("user-group", "create", "gone")
    det_admin("user-group", "delete", "gone", "--yes")
    groups = groups_of(api)
    assert groups["team"] == ["bob", "determined"] and "gone" not in groups
    # Every user is in the built-in group new users join (migration 0025).
    assert {"admin", "alice", "bob", "determined"} <= set(groups["everyone"])

    listed = det_admin("user-group", "list")
    assert "team" in listed and "everyone" in listed
    assert "team" in det_admin("user-group", "list", "--groups-user-belongs-to", "bob")
    assert "team" not in det_admin("user-group", "list", "--groups-user-belongs-to", "alice")
    described = det_admin("user-group", "describe", "team")
    assert "bob" in described and "alice" not in described

    # A user who is not an admin changes nothing (det prints the refusal and exits 0 or not).
    refused = det("user-group", "create", "mine", check=False)
    assert "only an admin may create a group" in refused
    refused = det("user-group", "add-user", "team", "alice", check=False)
    assert "update group" in refused
    groups = groups_of(api)
    assert "mine" not in groups and groups["team"] == ["bob", "determined"]


def held(api: AuthedStub, username: str) -> set[tuple[str, str, str]]:
    """(role, "user"/"group:NAME", scope) for every role the user holds, read back over the API."""
    user_id = api.GetUserByUsername(auth_pb2.GetUserByUsernameRequest(username=username)).user.id
    names = {
        g.group.group_id: g.group.name for g in api.GetGroups(rbac_pb2.GetGroupsRequest(limit=-1)).groups
    }
    workspaces = {w.id: w.name for w in api.GetWorkspaces(workspace_pb2.GetWorkspacesRequest()).workspaces}
    out: set[tuple[str, str, str]] = set()
    for role in api.GetRolesAssignedToUser(rbac_pb2.GetRolesAssignedToUserRequest(user_id=user_id)).roles:
        for u in role.user_role_assignments:
            scope = u.role_assignment
            where = (
                workspaces[scope.scope_workspace_id] if scope.HasField("scope_workspace_id") else "cluster"
            )
            out.add((role.role.name, "user", where))
        for g in role.group_role_assignments:
            scope = g.role_assignment
            where = (
                workspaces[scope.scope_workspace_id] if scope.HasField("scope_workspace_id") else "cluster"
            )
            out.add((role.role.name, f"group:{names[g.group_id]}", where))
    return out


def test_roles_with_the_stock_det(
    cluster: TestCluster, det_admin: Callable[..., str], det: Callable[..., str]
) -> None:
    api = cluster.login("admin")
    det_admin("user", "create", "alice", "--password", "Alice-pass1")
    det_admin("user-group", "create", "team")
    det_admin("workspace", "create", "ws1")

    roles = det_admin("rbac", "list-roles")
    for name in (
        "ClusterAdmin",
        "WorkspaceAdmin",
        "WorkspaceCreator",
        "Viewer",
        "Editor",
        "EditorRestricted",
    ):
        assert f"role '{name}'" in roles
    assert "PERMISSION_TYPE_CREATE_EXPERIMENT" in roles and "create experiment" in roles
    on_workspaces = det_admin("rbac", "list-roles", "--exclude-global-roles")
    assert "role 'Viewer'" in on_workspaces and "ClusterAdmin" not in on_workspaces

    # What migration 0025 and the defaults give: every user through "everyone", a workspace's
    # creator WorkspaceAdmin on it, an admin ClusterAdmin by the admin flag.
    assert held(api, "alice") == {
        ("Editor", "group:everyone", "Uncategorized"),
        ("Editor", "group:everyone", "cluster"),
        ("WorkspaceCreator", "group:everyone", "cluster"),
    }
    assert ("WorkspaceAdmin", "user", "ws1") in held(api, "admin")
    assert ("ClusterAdmin", "user", "cluster") in held(api, "admin")

    det_admin("rbac", "assign-role", "Viewer", "-u", "alice", "-w", "ws1")
    det_admin("rbac", "assign-role", "EditorRestricted", "-g", "team", "-w", "ws1")
    det_admin("rbac", "assign-role", "ClusterAdmin", "-u", "alice")
    det_admin("user-group", "add-user", "team", "alice")
    assert {
        ("Viewer", "user", "ws1"),
        ("ClusterAdmin", "user", "cluster"),
        ("EditorRestricted", "group:team", "ws1"),
    } <= held(api, "alice")

    assert "Viewer" in det_admin("rbac", "list-users-roles", "alice")
    assert "EditorRestricted" in det_admin("rbac", "list-groups-roles", "team")
    described = det_admin("rbac", "describe-role", "Editor")
    assert "everyone" in described
    members = det_admin("workspace", "list-members", "ws1")
    assert "alice" in members and "team" in members and "WorkspaceAdmin" in members
    mine = det("rbac", "my-permissions")
    assert "global permissions assigned" in mine and "'Uncategorized'" in mine
    assert "PERMISSION_TYPE_CREATE_NSC" in mine

    det_admin("rbac", "unassign-role", "ClusterAdmin", "-u", "alice")
    det_admin("rbac", "unassign-role", "Viewer", "-u", "alice", "-w", "ws1")
    after = held(api, "alice")
    assert ("Viewer", "user", "ws1") not in after and ("ClusterAdmin", "user", "cluster") not in after

    # Only those who may assign roles there do; a refused request changes nothing.
    refused = det("rbac", "assign-role", "ClusterAdmin", "-u", "determined", check=False)
    assert "'assign roles'" in refused
    refused = det("rbac", "assign-role", "Viewer", "-u", "alice", "-w", "ws1", check=False)
    assert "assign roles" in refused
    assert ("ClusterAdmin", "user", "cluster") not in held(api, "determined")
    assert ("Viewer", "user", "ws1") not in held(api, "alice")
