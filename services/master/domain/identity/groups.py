"""User groups (Determined's): create, list, read, rename, add and remove members, delete. Roles
assigned to a group hold for each of its members (grants.py). Changing groups takes UPDATE_GROUP
cluster-wide (ClusterAdmin); anyone logged in may list and read them, as in Determined.

Every request is checked whole before anything is written (names, the users named, bounds), so a
refused request changes nothing. Names are unique without regard to case, as users look them up.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.auth import UserInfo, user_info
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import AlreadyExists, InvalidArgument, NotFound
from services.master.domain.kernel.paging import Page, page_of
from services.master.store import models
from services.master.store.db import Database

MAX_NAME_CHARS = 255
# Users named in one request: bounded before any is looked up.
MAX_USERS_PER_REQUEST = 1000


@dataclass(frozen=True)
class GroupInfo:
    id: int
    name: str
    members: tuple[UserInfo, ...]


@dataclass(frozen=True)
class GroupRow:
    id: int
    name: str
    num_members: int


@dataclass(frozen=True)
class GroupQuery:
    name: str | None = None
    user_id: int | None = None
    offset: int = 0
    limit: int = 0


def _checked_name(name: str, field: str = "name") -> str:
    clean = name.strip()
    if not clean:
        raise InvalidArgument(f"{field}: a group needs a name")
    if len(clean) > MAX_NAME_CHARS:
        raise InvalidArgument(f"{field}: at most {MAX_NAME_CHARS} characters (got {len(clean)})")
    if any(ord(c) < 32 or ord(c) == 127 for c in clean):
        raise InvalidArgument(f"{field}: must not contain control characters")
    return clean


def _checked_ids(ids: list[int], field: str) -> list[int]:
    if len(ids) > MAX_USERS_PER_REQUEST:
        raise InvalidArgument(f"{field}: at most {MAX_USERS_PER_REQUEST} users a request (got {len(ids)})")
    return list(dict.fromkeys(ids))


def _check_users_exist(s: Session, ids: list[int], field: str) -> None:
    if not ids:
        return
    found = set(s.scalars(select(models.User.id).where(models.User.id.in_(ids))))
    missing = [i for i in ids if i not in found]
    if missing:
        raise NotFound(f"{field}: no user with id {', '.join(map(str, missing))}")


def _check_name_free(s: Session, name: str, field: str, except_id: int | None = None) -> None:
    q = select(models.UserGroup.id).where(func.lower(models.UserGroup.name) == name.lower())
    if except_id is not None:
        q = q.where(models.UserGroup.id != except_id)
    if s.scalar(q) is not None:
        raise AlreadyExists(f"{field}: a group named {name!r} already exists")


def _load(s: Session, group_id: int, field: str = "groupId") -> models.UserGroup:
    group = s.get(models.UserGroup, group_id)
    if group is None:
        raise NotFound(f"{field}: no group {group_id}")
    return group


def _info(s: Session, group: models.UserGroup) -> GroupInfo:
    members = s.scalars(
        select(models.User)
        .join(models.UserGroupMember, models.UserGroupMember.user_id == models.User.id)
        .where(models.UserGroupMember.group_id == group.id)
        .order_by(models.User.id)
    )
    return GroupInfo(group.id, group.name, tuple(user_info(u) for u in members))


def create(ctx: MasterContext, principal: Principal, name: str, add_users: list[int]) -> GroupInfo:
    clean = _checked_name(name)
    ids = _checked_ids(add_users, "addUsers")
    with ctx.unit_of_work() as w:
        access.check_cluster(principal, Permission.UPDATE_GROUP, "create a group", w.session)
        _check_name_free(w.session, clean, "name")
        _check_users_exist(w.session, ids, "addUsers")
        group = models.UserGroup(name=clean, joins_new_users=False, created_at=utcnow())
        w.session.add(group)
        w.session.flush()
        w.session.add_all(models.UserGroupMember(group_id=group.id, user_id=u) for u in ids)
        w.session.flush()
        w.later(ctx.access_changed)
        return _info(w.session, group)


def get(db: Database, group_id: int) -> GroupInfo:
    with db.read() as s:
        return _info(s, _load(s, group_id))


def get_many(db: Database, group_ids: list[int]) -> list[GroupInfo]:
    """The groups of these ids that exist, each with its members, in the ids' order: one session
    and two queries, whatever their number (a workspace's member groups)."""
    if not group_ids:
        return []
    with db.read() as s:
        found = {
            g.id: g for g in s.scalars(select(models.UserGroup).where(models.UserGroup.id.in_(group_ids)))
        }
        members: dict[int, list[models.User]] = {g: [] for g in found}
        rows = s.execute(
            select(models.UserGroupMember.group_id, models.User)
            .join(models.User, models.User.id == models.UserGroupMember.user_id)
            .where(models.UserGroupMember.group_id.in_(list(found)))
            .order_by(models.User.id)
        )
        for group_id, user in rows:
            members[group_id].append(user)
        return [
            GroupInfo(g, found[g].name, tuple(user_info(u) for u in members[g]))
            for g in group_ids
            if g in found
        ]


def listing(db: Database, query: GroupQuery) -> tuple[list[GroupRow], Page]:
    members = (
        select(models.UserGroupMember.group_id, func.count().label("n"))
        .group_by(models.UserGroupMember.group_id)
        .subquery()
    )
    q = select(models.UserGroup.id, models.UserGroup.name, func.coalesce(members.c.n, 0)).outerjoin(
        members, members.c.group_id == models.UserGroup.id
    )
    if query.name is not None:
        q = q.where(func.lower(models.UserGroup.name) == query.name.strip().lower())
    if query.user_id is not None:
        q = q.where(
            models.UserGroup.id.in_(
                select(models.UserGroupMember.group_id).where(models.UserGroupMember.user_id == query.user_id)
            )
        )
    with db.read() as s:
        rows = [GroupRow(i, n, int(c)) for i, n, c in s.execute(q.order_by(models.UserGroup.id))]
    page = page_of(len(rows), query.offset, query.limit)
    return rows[page.start : page.end], page


def update(
    ctx: MasterContext,
    principal: Principal,
    group_id: int,
    name: str | None,
    add_users: list[int],
    remove_users: list[int],
) -> GroupInfo:
    clean = _checked_name(name) if name is not None else None
    adding = _checked_ids(add_users, "addUsers")
    removing = _checked_ids(remove_users, "removeUsers")
    both = set(adding) & set(removing)
    if both:
        raise InvalidArgument(f"removeUsers: users {sorted(both)} are also in addUsers")
    with ctx.unit_of_work() as w:
        s = w.session
        access.check_cluster(principal, Permission.UPDATE_GROUP, "change a group", s)
        group = _load(s, group_id)
        if clean is not None and clean != group.name:
            _check_name_free(s, clean, "name", except_id=group.id)
        _check_users_exist(s, adding, "addUsers")
        current = set(
            s.scalars(
                select(models.UserGroupMember.user_id).where(models.UserGroupMember.group_id == group.id)
            )
        )
        already = [u for u in adding if u in current]
        if already:
            raise AlreadyExists(f"addUsers: users {already} are members of group {group.name!r} already")
        absent = [u for u in removing if u not in current]
        if absent:
            raise NotFound(f"removeUsers: users {absent} are not members of group {group.name!r}")
        if clean is not None:
            group.name = clean
        s.add_all(models.UserGroupMember(group_id=group.id, user_id=u) for u in adding)
        if removing:
            s.execute(
                delete(models.UserGroupMember)
                .where(models.UserGroupMember.group_id == group.id)
                .where(models.UserGroupMember.user_id.in_(removing))
            )
        s.flush()
        w.later(ctx.access_changed)
        return _info(s, group)


def delete_group(ctx: MasterContext, principal: Principal, group_id: int) -> None:
    """Delete a group: its members and its role assignments go with it (cascade)."""
    with ctx.unit_of_work() as w:
        access.check_cluster(principal, Permission.UPDATE_GROUP, "delete a group", w.session)
        group = _load(w.session, group_id)
        w.session.execute(delete(models.UserGroupMember).where(models.UserGroupMember.group_id == group.id))
        w.session.execute(delete(models.RoleAssignment).where(models.RoleAssignment.group_id == group.id))
        w.session.delete(group)
        w.later(ctx.access_changed)
