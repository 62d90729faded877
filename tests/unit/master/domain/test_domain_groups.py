"""User groups (domain/identity/groups.py): who may change them, what a refused request leaves
(nothing), names unique without regard to case, members added and removed, the group new users
join, and a deleted group's members and roles gone with it."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from services.master.domain.identity import groups
from services.master.domain.identity.groups import GroupQuery
from services.master.domain.kernel.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied
from services.master.store import models
from tests.unit.master.domain.harness import Master

pytestmark = pytest.mark.on_each_database


def names(master: Master, **query: object) -> list[tuple[str, int]]:
    rows, _ = groups.listing(master.db, GroupQuery(**query))  # type: ignore[arg-type]
    return [(r.name, r.num_members) for r in rows]


def test_an_admin_creates_renames_fills_and_deletes_a_group(master: Master) -> None:
    alice, bob = master.add_user("alice"), master.add_user("bob")
    assert alice.user_id is not None and bob.user_id is not None
    created = groups.create(master.ctx, master.admin, " team ", [alice.user_id])
    assert (created.name, [u.username for u in created.members]) == ("team", ["alice"])

    changed = groups.update(master.ctx, master.admin, created.id, "Team-A", [bob.user_id], [alice.user_id])
    assert (changed.name, [u.username for u in changed.members]) == ("Team-A", ["bob"])
    assert names(master, name="team-a") == [("Team-A", 1)]
    assert names(master, user_id=bob.user_id) == [("everyone", 4), ("Team-A", 1)]
    assert names(master, user_id=alice.user_id) == [("everyone", 4)]

    # Many at once, in the order asked, each with its members; an id of no group is passed over.
    other = groups.create(master.ctx, master.admin, "other", [alice.user_id, bob.user_id])
    many = groups.get_many(master.db, [other.id, created.id + 1000, created.id])
    assert [(g.name, [u.username for u in g.members]) for g in many] == [
        ("other", ["alice", "bob"]),
        ("Team-A", ["bob"]),
    ]
    assert many[1] == groups.get(master.db, created.id)

    groups.delete_group(master.ctx, master.admin, created.id)
    with pytest.raises(NotFound, match="groupId: no group"):
        groups.get(master.db, created.id)
    with master.db.read() as s:
        left = s.scalar(
            select(func.count())
            .select_from(models.UserGroupMember)
            .where(models.UserGroupMember.group_id == created.id)
        )
    assert left == 0


def test_every_user_is_in_everyone_and_new_users_join_it(master: Master) -> None:
    """Migration 0025's group: the built-in users (created after the migration) and later ones."""
    (everyone,) = groups.listing(master.db, GroupQuery(name="everyone"))[0]
    before = everyone.num_members
    master.add_user("carol")
    members = [u.username for u in groups.get(master.db, everyone.id).members]
    assert {"admin", "determined", "carol"} <= set(members) and len(members) == before + 1


def test_a_user_who_is_not_admin_is_refused_and_nothing_changes(master: Master) -> None:
    alice = master.add_user("alice")
    with pytest.raises(PermissionDenied, match="only an admin may create a group"):
        groups.create(master.ctx, alice, "mine", [])
    team = groups.create(master.ctx, master.admin, "team", [])
    with pytest.raises(PermissionDenied, match="update group"):
        groups.update(master.ctx, alice, team.id, None, [alice.user_id or 0], [])
    with pytest.raises(PermissionDenied):
        groups.delete_group(master.ctx, alice, team.id)
    assert names(master, name="mine") == [] and groups.get(master.db, team.id).members == ()


def test_bad_requests_name_the_field_and_change_nothing(master: Master) -> None:
    alice = master.add_user("alice")
    assert alice.user_id is not None
    team = groups.create(master.ctx, master.admin, "team", [alice.user_id])
    with pytest.raises(AlreadyExists, match="name: a group named 'TEAM' already exists"):
        groups.create(master.ctx, master.admin, "TEAM", [])
    with pytest.raises(InvalidArgument, match="name: a group needs a name"):
        groups.create(master.ctx, master.admin, "  ", [])
    with pytest.raises(NotFound, match="addUsers: no user with id 999"):
        groups.create(master.ctx, master.admin, "other", [alice.user_id, 999])
    with pytest.raises(InvalidArgument, match="addUsers: at most 1000"):
        groups.create(master.ctx, master.admin, "big", list(range(1001)))
    with pytest.raises(AlreadyExists, match=r"addUsers: users .* members of group 'team' already"):
        groups.update(master.ctx, master.admin, team.id, "renamed", [alice.user_id], [])
    with pytest.raises(NotFound, match="removeUsers: users \\[999\\] are not members"):
        groups.update(master.ctx, master.admin, team.id, "renamed", [], [999])
    with pytest.raises(NotFound, match="groupId: no group 12345"):
        groups.update(master.ctx, master.admin, 12345, "x", [], [])
    assert names(master, name="other") == [] and names(master, name="team") == [("team", 1)]
