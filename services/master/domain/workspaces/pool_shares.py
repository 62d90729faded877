"""Fair share's weights and quotas (`cairn workspace set-quota`, the REST API): per fair-share pool,
a workspace's weight among the pool's workspaces, the slots it is guaranteed while it wants them
and the slots it may never exceed; the same for a user within a workspace. The scheduler divides
the pool by them (services/scheduler/domain/fair_share.py); the master sends them with each pool
(scheduling/fair_share_inputs.py).

Only an admin sets them. Anyone may read a workspace's, with the slots it and its users hold now,
so a workspace's members see their usage against their quota.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import FailedPrecondition, InvalidArgument, NotFound
from services.master.domain.kernel.states import PLACED_ALLOCATION, WS
from services.master.store import models

MAX_WEIGHT = 1000.0
MAX_QUOTA_SLOTS = 100_000


@dataclass(frozen=True)
class ShareSetting:
    pool: str
    # 0: the workspace itself.
    user_id: int
    username: str
    weight: float
    guaranteed_slots: int
    max_slots: int
    # Slots the workspace (or the user in it) holds in the pool now.
    slots_in_use: int


def _check_pool(ctx: MasterContext, pool: str) -> None:
    found = next((p for p in ctx.settings.pools if p.name == pool), None)
    if found is None:
        names = ", ".join(p.name for p in ctx.settings.pools)
        raise InvalidArgument(f"resourcePool: no resource pool {pool!r} (pools: {names})")
    if found.scheduler_type != "fair_share":
        raise FailedPrecondition(
            f"resourcePool: pool {pool!r} schedules by priority; weights and quotas apply to a pool "
            "whose config says `scheduler: {type: fair_share}`"
        )


def _check_numbers(weight: float, guaranteed: int, maximum: int) -> None:
    if not math.isfinite(weight) or not 0 < weight <= MAX_WEIGHT:
        raise InvalidArgument(f"weight: a number above 0 and at most {MAX_WEIGHT:g} (got {weight!r})")
    for name, value in (("guaranteedSlots", guaranteed), ("maxSlots", maximum)):
        if not 0 <= value <= MAX_QUOTA_SLOTS:
            raise InvalidArgument(f"{name}: 0 to {MAX_QUOTA_SLOTS} slots (got {value})")
    if maximum and guaranteed > maximum:
        raise InvalidArgument(f"guaranteedSlots: {guaranteed} is more than maxSlots {maximum}")


def _check_workspace(s: Session, workspace_id: int, user_id: int) -> None:
    workspace = s.get(models.Workspace, workspace_id)
    if workspace is None or workspace.state == WS.DELETING:
        raise NotFound(f"workspace {workspace_id} not found")
    if user_id and s.get(models.User, user_id) is None:
        raise NotFound(f"userId: user {user_id} not found")


def set_share(
    ctx: MasterContext,
    principal: Principal,
    workspace_id: int,
    pool: str,
    *,
    user_id: int = 0,
    weight: float = 1.0,
    guaranteed_slots: int = 0,
    max_slots: int = 0,
) -> None:
    """Set the workspace's (user_id 0) or one of its users' weight and quota in `pool`."""
    access.check_cluster(principal, Permission.SET_RESOURCE_QUOTAS, "set weights and quotas")
    if user_id < 0:
        raise InvalidArgument(f"userId: a user's id, or 0 for the workspace (got {user_id})")
    _check_pool(ctx, pool)
    _check_numbers(weight, guaranteed_slots, max_slots)
    with ctx.unit_of_work() as w:
        _check_workspace(w.session, workspace_id, user_id)
        row = w.session.get(models.PoolShare, (pool, workspace_id, user_id))
        if row is None:
            row = models.PoolShare(pool_name=pool, workspace_id=workspace_id, user_id=user_id)
            w.session.add(row)
        row.weight, row.guaranteed_slots, row.max_slots = weight, guaranteed_slots, max_slots
        w.later(ctx.scheduler_wakeup.set)  # a pass sends the pool's new groups at once


def clear_share(
    ctx: MasterContext, principal: Principal, workspace_id: int, pool: str, user_id: int = 0
) -> None:
    """Back to weight 1 and no quota."""
    access.check_cluster(principal, Permission.SET_RESOURCE_QUOTAS, "set weights and quotas")
    with ctx.unit_of_work() as w:
        s = models.PoolShare
        gone = w.session.execute(
            delete(s).where(s.pool_name == pool, s.workspace_id == workspace_id, s.user_id == user_id)
        )
        if not gone.rowcount:  # type: ignore[attr-defined]
            who = f"user {user_id} in workspace {workspace_id}" if user_id else f"workspace {workspace_id}"
            raise NotFound(f"no weight or quota is set for {who} in pool {pool!r}")
        w.later(ctx.scheduler_wakeup.set)


def shares_of(ctx: MasterContext, workspace_id: int) -> list[ShareSetting]:
    """The workspace's settings in every fair-share pool (set ones, and weight 1 without a quota
    where none is set), its users' set ones, with the slots each holds now."""
    fair_pools = [p.name for p in ctx.settings.pools if p.scheduler_type == "fair_share"]
    with ctx.db.read() as s:
        _check_workspace(s, workspace_id, 0)
        rows = {
            (r.pool_name, r.user_id): r
            for r in s.scalars(select(models.PoolShare).where(models.PoolShare.workspace_id == workspace_id))
        }
        a, t = models.Allocation, models.Task
        held: dict[tuple[str, int], int] = defaultdict(int)
        query = (
            select(a.resource_pool, t.owner_id, func.sum(a.slots))
            .join(t, t.id == a.task_id)
            .where(t.workspace_id == workspace_id, a.state.in_(list(PLACED_ALLOCATION)))
            .group_by(a.resource_pool, t.owner_id)
        )
        for pool, owner, slots in s.execute(query):
            held[(pool, owner)] += int(slots or 0)
            held[(pool, 0)] += int(slots or 0)
        user_ids = {user for _, user in rows if user}
        names = dict(
            s.execute(select(models.User.id, models.User.username).where(models.User.id.in_(user_ids))).all()
        )
    settings = []
    for pool in fair_pools:
        keys = sorted({(pool, 0)} | {k for k in rows if k[0] == pool})
        for key in keys:
            row = rows.get(key)
            settings.append(
                ShareSetting(
                    pool=pool,
                    user_id=key[1],
                    username=names.get(key[1], ""),
                    weight=row.weight if row else 1.0,
                    guaranteed_slots=row.guaranteed_slots if row else 0,
                    max_slots=row.max_slots if row else 0,
                    slots_in_use=held.get(key, 0),
                )
            )
    return settings
