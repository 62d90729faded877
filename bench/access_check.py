"""What an access decision costs a call (domain/identity/access.py), against the goal of < 0.1 ms:
the gate every API call passes (attaching the caller's grants from the cache, then check_call),
a decision on an object (may_change: a workspace's permission and the owner's rule), and the set
of readable workspaces a listing filters by; and, for scale, the grants computed afresh (the
two-query load the cache saves), on a migrated SQLite database whose user holds roles on 50
workspaces directly and through 5 groups.

    .venv/bin/python -m bench.access_check [--calls 200000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from services.common.principal import Principal
from services.master.domain.identity import access, grants
from services.master.domain.identity.grants import GrantCache
from services.master.domain.identity.permissions import Permission
from services.master.domain.identity.roles import EDITOR, VIEWER, WORKSPACE_ADMIN
from services.master.domain.kernel.clock import utcnow
from services.master.store import models
from services.master.store.db import Database

WORKSPACES = 50
GROUPS = 5


def _seed(db: Database) -> int:
    now = utcnow()
    with db.transaction() as s:
        user = models.User(
            username="bench", password_hash="", admin=False, active=True, created_at=now, modified_at=now
        )
        s.add(user)
        for i in range(WORKSPACES):
            s.add(models.Workspace(name=f"w{i}", user_id=None, created_at=now))
        s.flush()
        workspace_ids = [w.id for w in s.query(models.Workspace).filter(models.Workspace.name.like("w%"))]
        for i in range(GROUPS):
            group = models.UserGroup(name=f"g{i}", joins_new_users=False, created_at=now)
            s.add(group)
            s.flush()
            s.add(models.UserGroupMember(group_id=group.id, user_id=user.id))
            for w in workspace_ids[i::GROUPS]:
                s.add(
                    models.RoleAssignment(
                        role_id=VIEWER.id, group_id=group.id, workspace_id=w, created_at=now
                    )
                )
        for n, w in enumerate(workspace_ids):
            role = (EDITOR, WORKSPACE_ADMIN)[n % 2]
            s.add(models.RoleAssignment(role_id=role.id, user_id=user.id, workspace_id=w, created_at=now))
        return int(user.id)


def _per_call(fn: Callable[[], object], calls: int) -> float:
    """Microseconds a call, the best of three runs of `calls`."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        db = Database(f"sqlite:///{Path(home) / 'bench.db'}")
        db.migrate()
        user_id = _seed(db)
        version = 0
        cache = GrantCache(db, lambda: version)
        bare = Principal(user_id=user_id, username="bench")
        principal = cache.attach(bare)
        workspace = 7

        def gate() -> None:
            access.check_call(cache.attach(bare), "KillExperiment")

        def decide() -> bool:
            return access.may_change(principal, Permission.UPDATE_EXPERIMENT, workspace, [user_id + 1])

        def readable() -> object:
            return access.readable_workspaces(cache.attach(bare), Permission.VIEW_EXPERIMENT_METADATA)

        def fresh() -> object:
            with db.read() as s:
                return grants.load(s, user_id)

        rows = [
            ("the gate: grants attached from the cache, check_call", _per_call(gate, args.calls)),
            ("a decision on an object (may_change)", _per_call(decide, args.calls)),
            ("a listing's readable workspaces (cache, then memo)", _per_call(readable, args.calls)),
            ("grants computed afresh (what the cache saves)", _per_call(fresh, max(1, args.calls // 200))),
        ]
        db.dispose()
    print(f"{WORKSPACES} workspaces, {GROUPS} groups; microseconds a call (best of 3 x {args.calls:,})")
    for name, micros in rows:
        print(f"  {name:<58} {micros:8.2f} us")


if __name__ == "__main__":
    main()
