"""Weights and quotas (`cairn workspace set-quota`, the REST API, the WebUI): per pool, the slots a
workspace is guaranteed while it wants them and the slots it may never exceed, and in a fair-share
pool its weight among the pool's workspaces; the same for a user within a workspace. The scheduler
keeps them in every pool (services/scheduler/domain/quotas.py: fair share divides the pool by them,
a priority pool places guaranteed work first and caps the rest); the master sends them with each
pool (scheduling/fair_share_inputs.py).

Only an admin sets them. Guarantees are promises of slots the pool has: a change that would make
them add up to more than the pool's slots is refused. Anyone may read a workspace's, with the
slots it and its users hold now, so a workspace's members see their usage against their quota.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.configuration.pools import PoolSettings
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import InvalidArgument, NotFound
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
    # Whether the pool divides by weight (fair share); a priority pool keeps only the quota.
    fair_share: bool


def _check_pool(ctx: MasterContext, pool: str, weight: float) -> PoolSettings:
    found = next((p for p in ctx.settings.pools if p.name == pool), None)
    if found is None:
        names = ", ".join(p.name for p in ctx.settings.pools)
        raise InvalidArgument(f"resourcePool: no resource pool {pool!r} (pools: {names})")
    if found.scheduler_type != "fair_share" and weight != 1.0:
        raise InvalidArgument(
            f"weight: pool {pool!r} schedules by priority, where only guaranteedSlots and maxSlots "
            "apply; a weight divides a pool whose config says `scheduler: {type: fair_share}`"
        )
    return found


def pool_slots(s: Session, pool: PoolSettings) -> int | None:
    """The most slots `pool` can offer: what its provider may launch, or every slot of the agents
    that have joined it (connected or not, enabled or not: they may come back); None while no
    agent has joined it (its size is not known yet)."""
    if pool.provider is not None:
        return pool.provider.limits.instance_slots * pool.provider.limits.max_instances
    agents = select(models.Agent.id).where(models.Agent.resource_pool == pool.name)
    if s.scalar(select(func.count()).select_from(agents.subquery())) == 0:
        return None
    return int(
        s.scalar(
            select(func.count()).select_from(models.AgentSlot).where(models.AgentSlot.agent_id.in_(agents))
        )
        or 0
    )


def _promised(guarantees: dict[tuple[int, int], int]) -> int:
    """The slots the guarantees of one pool promise at once: per workspace, its own guarantee or
    its users' together, whichever is more (a user's slots are its workspace's)."""
    own: dict[int, int] = defaultdict(int)
    users: dict[int, int] = defaultdict(int)
    for (workspace_id, user_id), slots in guarantees.items():
        (users if user_id else own)[workspace_id] += slots
    return sum(max(own[w], users[w]) for w in own.keys() | users.keys())


def _check_guarantees(
    s: Session, pool: PoolSettings, workspace_id: int, user_id: int, guaranteed: int
) -> None:
    """Refuse a guarantee that would make the pool's promise more than its slots (a lowered one is
    always taken, even where agents have left since)."""
    share = models.PoolShare
    rows = s.execute(
        select(share.workspace_id, share.user_id, share.guaranteed_slots).where(share.pool_name == pool.name)
    )
    before = {(w, u): g for w, u, g in rows if g}
    after = dict(before)
    after[(workspace_id, user_id)] = guaranteed
    promised = _promised(after)
    if promised <= _promised(before):
        return
    slots = pool_slots(s, pool)
    if slots is not None and promised > slots:
        raise InvalidArgument(
            f"guaranteedSlots: the guarantees in pool {pool.name!r} would add up to {promised} slots, "
            f"more than the {slots} it has"
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
    _check_numbers(weight, guaranteed_slots, max_slots)
    settings = _check_pool(ctx, pool, weight)
    with ctx.unit_of_work() as w:
        _check_workspace(w.session, workspace_id, user_id)
        _check_guarantees(w.session, settings, workspace_id, user_id, guaranteed_slots)
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
    """The workspace's settings in every pool (set ones, and weight 1 without a quota where none is
    set), its users' set ones, with the slots each holds now."""
    fair = {p.name: p.scheduler_type == "fair_share" for p in ctx.settings.pools}
    with ctx.db.read() as s:
        _check_workspace(s, workspace_id, 0)
        rows = {
            (r.pool_name, r.user_id): r
            for r in s.scalars(select(models.PoolShare).where(models.PoolShare.workspace_id == workspace_id))
        }
        held = {(pool, user): n for (_, pool, user), n in _held_slots(s, workspace_id).items()}
        user_ids = {user for _, user in rows if user}
        names = dict(
            s.execute(select(models.User.id, models.User.username).where(models.User.id.in_(user_ids))).all()
        )
    settings = []
    for pool, divides in fair.items():
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
                    fair_share=divides,
                )
            )
    return settings


def _held_slots(s: Session, workspace_id: int | None = None) -> dict[tuple[int, str, int], int]:
    """The slots placed allocations hold, by (workspace, pool, owner), and by (workspace, pool, 0)
    for the workspace as a whole: of one workspace, or (None) of all."""
    a, t = models.Allocation, models.Task
    query = (
        select(t.workspace_id, a.resource_pool, t.owner_id, func.sum(a.slots))
        .join(t, t.id == a.task_id)
        .where(a.state.in_(list(PLACED_ALLOCATION)), t.workspace_id.is_not(None))
        .group_by(t.workspace_id, a.resource_pool, t.owner_id)
    )
    if workspace_id is not None:
        query = query.where(t.workspace_id == workspace_id)
    held: dict[tuple[int, str, int], int] = defaultdict(int)
    for workspace, pool, owner, slots in s.execute(query):
        if workspace is None:
            continue  # not asked for (the query leaves them out): for the type's sake
        held[(workspace, pool, owner or 0)] += int(slots or 0)
        if owner:
            held[(workspace, pool, 0)] += int(slots or 0)
    return held


@dataclass(frozen=True)
class QuotaUse:
    """A quota an admin set (a guarantee or a maximum), and what its group holds now."""

    pool: str
    workspace_id: int
    workspace: str
    user_id: int  # 0: the workspace's own
    username: str
    guaranteed_slots: int
    max_slots: int
    slots_in_use: int


def quota_use(s: Session) -> list[QuotaUse]:
    """Every quota set in every pool, with its group's slots in use (the master's /metrics): as
    many rows as admins set, read in two queries."""
    ps, w, u = models.PoolShare, models.Workspace, models.User
    rows = s.execute(
        select(ps, w.name, u.username)
        .join(w, w.id == ps.workspace_id)
        .outerjoin(u, u.id == ps.user_id)
        .where((ps.guaranteed_slots > 0) | (ps.max_slots > 0))
        .order_by(ps.pool_name, ps.workspace_id, ps.user_id)
    ).all()
    held = _held_slots(s) if rows else {}
    return [
        QuotaUse(
            pool=r.pool_name,
            workspace_id=r.workspace_id,
            workspace=workspace,
            user_id=r.user_id or 0,
            username=username or "",
            guaranteed_slots=r.guaranteed_slots,
            max_slots=r.max_slots,
            slots_in_use=held.get((r.workspace_id, r.pool_name, r.user_id or 0), 0),
        )
        for r, workspace, username in rows
    ]
