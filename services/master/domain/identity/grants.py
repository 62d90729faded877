"""What a user may do: the permissions of the roles they hold, cluster-wide and per workspace,
directly and through their groups. access.py asks these; nothing else reads role assignments to
decide.

Computed once per call: where a call's caller is established (the master's authenticator, the
task proxy, the streaming endpoint) GrantCache.attach puts them on the Principal. Between calls
they are kept per user while the context's access_version stays the same (every committed change
to assignments, groups or workspaces moves it), so a call costs a dictionary lookup, not queries.
A principal that arrives without them (the master's own calls, tests driving the domain) has them
computed from the database the first time a decision needs them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlalchemy import bindparam, or_, select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.identity.permissions import Permission
from services.master.domain.identity.roles import BY_ID
from services.master.store import models
from services.master.store.db import Database


@dataclass(frozen=True)
class Grants:
    cluster: frozenset[Permission]
    workspaces: Mapping[int, frozenset[Permission]]
    # Memo of workspaces_with(), per permission: filled on first use, never changes after.
    _with: dict[Permission, frozenset[int] | None] = field(default_factory=dict, compare=False, repr=False)

    def has(self, permission: Permission, workspace_id: int | None) -> bool:
        """Held cluster-wide, or on `workspace_id` (None: cluster-wide only)."""
        if permission in self.cluster:
            return True
        return workspace_id is not None and permission in self.workspaces.get(workspace_id, ())

    def has_anywhere(self, permission: Permission) -> bool:
        found = self.workspaces_with(permission)
        return found is None or bool(found)

    def workspaces_with(self, permission: Permission) -> frozenset[int] | None:
        """The workspaces where `permission` is held; None: all of them (held cluster-wide)."""
        if permission in self._with:
            return self._with[permission]
        found = (
            None
            if permission in self.cluster
            else frozenset(w for w, ps in self.workspaces.items() if permission in ps)
        )
        self._with[permission] = found
        return found


NOTHING = Grants(frozenset(), {})
EVERYTHING = Grants(frozenset(Permission), {})


# A user's role assignments, their own and their groups': built once, as every call's access check
# that misses the grant cache runs it.
_ASSIGNMENTS = select(models.RoleAssignment.role_id, models.RoleAssignment.workspace_id).where(
    or_(
        models.RoleAssignment.user_id == bindparam("user_id"),
        models.RoleAssignment.group_id.in_(
            select(models.UserGroupMember.group_id).where(
                models.UserGroupMember.user_id == bindparam("user_id")
            )
        ),
    )
)


def load(s: Session, user_id: int) -> Grants:
    """A user's grants from their role assignments and their groups' (two indexed lookups)."""
    rows = s.execute(_ASSIGNMENTS, {"user_id": user_id})
    cluster: set[Permission] = set()
    workspaces: dict[int, set[Permission]] = {}
    for role_id, workspace_id in rows:
        role = BY_ID.get(role_id)
        if role is None:  # a role of a newer Cairn: grants nothing here
            continue
        if workspace_id is None:
            cluster |= role.permissions
        else:
            workspaces.setdefault(workspace_id, set()).update(role.permissions)
    return Grants(frozenset(cluster), {w: frozenset(ps) for w, ps in workspaces.items()})


def of(principal: Principal, s: Session | None = None) -> Grants:
    """The principal's grants: everything for the cluster itself and for admins (the admin flag is
    ClusterAdmin); those attached to it; else loaded through `s` (without one: nothing)."""
    if principal.internal or principal.admin:
        return EVERYTHING
    if principal.user_id is None:
        return NOTHING
    if isinstance(principal.grants, Grants):
        return principal.grants
    return load(s, principal.user_id) if s is not None else NOTHING


class GrantCache:
    """Each user's grants, kept while `version()` (the context's access_version) stays put."""

    def __init__(self, db: Database, version: Callable[[], int], max_users: int = 10_000) -> None:
        self._db = db
        self._version = version
        self._max = max_users
        self._entries: dict[int, tuple[int, Grants]] = {}
        self._lock = threading.Lock()

    def get(self, user_id: int) -> Grants:
        version = self._version()
        hit = self._entries.get(user_id)
        if hit is not None and hit[0] == version:
            return hit[1]
        # Read before the query: grants computed while a change commits are stored under the
        # version they started from, so they are never served after it.
        with self._db.read() as s:
            grants = load(s, user_id)
        with self._lock:
            if len(self._entries) >= self._max:
                self._entries.clear()
            self._entries[user_id] = (version, grants)
        return grants

    def attach(self, principal: Principal) -> Principal:
        """The principal with its grants, for a user's call (others need none: grants.of)."""
        if principal.user_id is None or principal.admin or principal.internal:
            return principal
        # Built directly: dataclasses.replace costs ten times as much, on every call.
        return Principal(
            user_id=principal.user_id,
            username=principal.username,
            admin=principal.admin,
            allocation_id=principal.allocation_id,
            internal=principal.internal,
            agent_id=principal.agent_id,
            grants=self.get(principal.user_id),
        )

    def authenticating(self, authenticate: Callable[[str], Principal]) -> Callable[[str], Principal]:
        """`authenticate` (a session token's check) whose principals carry their grants."""
        return lambda token: self.attach(authenticate(token))
