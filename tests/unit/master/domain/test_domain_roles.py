"""Role assignments (domain/identity/role_assignments.py) and the grants they make (grants.py):
who may assign where, what a refused request leaves (nothing), roles held through groups, a
workspace's creator administering it, and grants kept between calls only while nothing changed."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from services.common.principal import Principal
from services.master.domain.identity import grants, groups, role_assignments
from services.master.domain.identity.grants import GrantCache
from services.master.domain.identity.permissions import Permission
from services.master.domain.identity.role_assignments import Assignment, Requested
from services.master.domain.identity.roles import CLUSTER_ADMIN, EDITOR, VIEWER, WORKSPACE_ADMIN
from services.master.domain.kernel.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied
from services.master.domain.workspaces import workspaces
from services.master.store import models
from tests.unit.master.domain.harness import Master

pytestmark = pytest.mark.on_each_database


def workspace(master: Master, name: str, principal: Principal | None = None) -> int:
    with master.ctx.unit_of_work() as w:
        return workspaces.create_workspace(
            master.ctx, w, principal or master.admin, name, workspaces.WorkspaceSettings()
        )


def ask(*assignments: Assignment) -> list[Requested]:
    return [Requested(a, f"userRoleAssignments[{i}]") for i, a in enumerate(assignments)]


def stored(master: Master) -> set[tuple[int, int | None, int | None, int | None]]:
    with master.db.read() as s:
        return {
            (r.role_id, r.user_id, r.group_id, r.workspace_id)
            for r in s.scalars(select(models.RoleAssignment))
        }


def held(master: Master, principal: Principal) -> grants.Grants:
    with master.db.read() as s:
        return grants.of(principal, s)


def test_a_workspace_admin_assigns_on_its_workspace_only(master: Master) -> None:
    alice, bob = master.add_user("alice"), master.add_user("bob")
    assert alice.user_id is not None and bob.user_id is not None
    mine = workspace(master, "alices", alice)  # its creator administers it
    other = workspace(master, "others")
    assert (WORKSPACE_ADMIN.id, alice.user_id, None, mine) in stored(master)

    role_assignments.assign(
        master.ctx, alice, ask(Assignment(VIEWER.id, user_id=bob.user_id, workspace_id=mine))
    )
    assert held(master, bob).has(Permission.VIEW_EXPERIMENT_METADATA, mine)
    before = stored(master)
    with pytest.raises(PermissionDenied, match="may not assign roles on workspace"):
        role_assignments.assign(
            master.ctx, alice, ask(Assignment(VIEWER.id, user_id=bob.user_id, workspace_id=other))
        )
    with pytest.raises(PermissionDenied, match="assign roles on the cluster"):
        role_assignments.assign(master.ctx, alice, ask(Assignment(EDITOR.id, user_id=bob.user_id)))
    with pytest.raises(PermissionDenied, match="remove roles on the cluster"):
        role_assignments.remove(master.ctx, bob, ask(Assignment(EDITOR.id, group_id=1)))
    assert stored(master) == before

    role_assignments.remove(
        master.ctx, alice, ask(Assignment(VIEWER.id, user_id=bob.user_id, workspace_id=mine))
    )
    assert (VIEWER.id, bob.user_id, None, mine) not in stored(master)


def test_roles_held_through_a_group_and_gone_with_it(master: Master) -> None:
    alice = master.add_user("alice")
    assert alice.user_id is not None
    place = workspace(master, "place")
    team = groups.create(master.ctx, master.admin, "team", [alice.user_id])
    role_assignments.assign(
        master.ctx,
        master.admin,
        [
            Requested(
                Assignment(WORKSPACE_ADMIN.id, group_id=team.id, workspace_id=place),
                "groupRoleAssignments[0]",
            )
        ],
    )
    assert held(master, alice).has(Permission.CHANGE_OTHERS, place)
    assert not held(master, alice).has(Permission.CHANGE_OTHERS, 1)
    listed = role_assignments.of_user(master.db, alice.user_id)
    assert Assignment(WORKSPACE_ADMIN.id, group_id=team.id, workspace_id=place) in listed
    groups.delete_group(master.ctx, master.admin, team.id)
    assert not held(master, alice).has(Permission.CHANGE_OTHERS, place)


def test_bad_assignments_name_the_field_and_change_nothing(master: Master) -> None:
    alice = master.add_user("alice")
    place = workspace(master, "place")
    before = stored(master)
    with pytest.raises(
        InvalidArgument, match=r"userRoleAssignments\[0\].roleAssignment.role.roleId: no role 6"
    ):
        role_assignments.assign(master.ctx, master.admin, ask(Assignment(6, user_id=alice.user_id)))
    with pytest.raises(InvalidArgument, match="ClusterAdmin is assigned cluster-wide only"):
        role_assignments.assign(
            master.ctx,
            master.admin,
            ask(Assignment(CLUSTER_ADMIN.id, user_id=alice.user_id, workspace_id=place)),
        )
    with pytest.raises(NotFound, match=r"userRoleAssignments\[1\].userId: no user 999"):
        role_assignments.assign(
            master.ctx,
            master.admin,
            ask(Assignment(VIEWER.id, user_id=alice.user_id), Assignment(VIEWER.id, user_id=999)),
        )
    with pytest.raises(NotFound, match="scopeWorkspaceId: no workspace 999"):
        role_assignments.assign(
            master.ctx, master.admin, ask(Assignment(VIEWER.id, user_id=alice.user_id, workspace_id=999))
        )
    with pytest.raises(InvalidArgument, match="at most 1000"):
        role_assignments.assign(
            master.ctx, master.admin, ask(*[Assignment(VIEWER.id, user_id=i) for i in range(1001)])
        )
    assert stored(master) == before
    role_assignments.assign(master.ctx, master.admin, ask(Assignment(VIEWER.id, user_id=alice.user_id)))
    with pytest.raises(AlreadyExists, match="holds role 4 on the cluster already"):
        role_assignments.assign(master.ctx, master.admin, ask(Assignment(VIEWER.id, user_id=alice.user_id)))
    with pytest.raises(NotFound, match="does not hold role 5 on workspace"):
        role_assignments.remove(
            master.ctx, master.admin, ask(Assignment(EDITOR.id, user_id=alice.user_id, workspace_id=place))
        )


def test_grants_are_kept_until_an_assignment_changes(master: Master) -> None:
    alice = master.add_user("alice")
    assert alice.user_id is not None
    place = workspace(master, "place")
    cache = GrantCache(master.db, lambda: master.ctx.access_version)
    assert not cache.get(alice.user_id).has(Permission.CHANGE_OTHERS, place)
    first = cache.get(alice.user_id)
    assert cache.get(alice.user_id) is first  # no query while nothing changed
    role_assignments.assign(
        master.ctx,
        master.admin,
        ask(Assignment(WORKSPACE_ADMIN.id, user_id=alice.user_id, workspace_id=place)),
    )
    assert cache.get(alice.user_id).has(Permission.CHANGE_OTHERS, place)
    attached = cache.attach(alice)
    assert grants.of(attached) is cache.get(alice.user_id)
    assert grants.of(master.admin) is grants.EVERYTHING
