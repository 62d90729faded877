"""What the scheduler needs of a pool beyond its requests, sent with the pool: in a fair-share pool,
each workspace's and user's weight and quota (workspaces/pool_shares.py) and recent usage; in a
priority pool, the quotas set there (the scheduler keeps them: services/scheduler/domain/quotas.py).

Recent usage is every slot-second the group's allocations held in the pool, each weighted by
2^(-age / half-life) (the pool's `fair_share.usage_half_life`), as Slurm decays usage: a team that
used little lately goes first. Integrated exactly over each allocation's run, so it does not depend
on how often it is computed. Usage older than ten half-lives (under 0.1 % of its weight) is not
read. The groups are recomputed every REFRESH_S seconds (the scheduling view asks), at once when an admin
changes a weight or quota, and when work of a workspace or user the pool has no group for arrives.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta

from sqlalchemy import bindparam, or_, select
from sqlalchemy.orm import Session

from cairn.scheduler.v1 import scheduler_pb2 as pb
from services.master.configuration.pools import PoolSettings
from services.master.domain.kernel.states import LIVE_ALLOCATION
from services.master.store import models

REFRESH_S = 10.0
_HORIZON_HALF_LIVES = 10


def workspace_key(workspace_id: int | None) -> str:
    return str(workspace_id or 0)


def user_key(workspace_id: int | None, user_id: int) -> str:
    return f"{workspace_id or 0}/{user_id}"


def decayed_slot_seconds(
    slots: int, start: datetime, end: datetime | None, now: datetime, half_life_s: float
) -> float:
    """slots * the integral over [start, end] of 2^(-(now - t) / half-life) dt."""
    stop = min(end or now, now)
    if stop <= start:
        return 0.0
    rate = math.log(2) / half_life_s
    older = (now - start).total_seconds()
    newer = (now - stop).total_seconds()
    return slots * (math.exp(-rate * newer) - math.exp(-rate * older)) / rate


def _live_groups(s: Session, pool: PoolSettings) -> set[tuple[int | None, int]]:
    """(workspace, owner) of the pool's live allocations: each gets a group (for its name)."""
    a, t = models.Allocation, models.Task
    query = (
        select(t.workspace_id, t.owner_id)
        .select_from(a)
        .join(t, t.id == a.task_id)
        .where(a.resource_pool == pool.name, a.state.in_(list(LIVE_ALLOCATION)), a.slots > 0)
        .distinct()
    )
    return {(workspace_id, owner_id) for workspace_id, owner_id in s.execute(query)}


def _usage(s: Session, pool: PoolSettings, now: datetime) -> tuple[dict[str, float], dict[str, float]]:
    a, t = models.Allocation, models.Task
    since = now - timedelta(seconds=pool.usage_half_life_s * _HORIZON_HALF_LIVES)
    query = (
        select(a.slots, a.start_time, a.end_time, t.workspace_id, t.owner_id)
        .join(t, t.id == a.task_id)
        .where(
            a.resource_pool == pool.name,
            a.start_time.is_not(None),
            a.slots > 0,
            or_(a.end_time.is_(None), a.end_time > since),
        )
    )
    by_workspace: dict[str, float] = defaultdict(float)
    by_user: dict[str, float] = defaultdict(float)
    for slots, start, end, workspace_id, owner_id in s.execute(query):
        if start is None:
            continue
        used = decayed_slot_seconds(slots, start, end, now, pool.usage_half_life_s)
        by_workspace[workspace_key(workspace_id)] += used
        by_user[user_key(workspace_id, owner_id)] += used
    return by_workspace, by_user


def _name_groups(s: Session, workspaces: list[pb.ShareGroup], users: list[pb.ShareGroup]) -> None:
    """Names for waiting reasons: "workspace 'vision'", "user 'alice' in workspace 'vision'", for
    the groups of every pool at once (two reads for the pass, not two for each pool)."""
    user_pairs = [tuple(int(part) for part in group.key.split("/")) for group in users]
    workspace_ids = {int(group.key) for group in workspaces} | {w for w, _ in user_pairs}
    user_ids = {u for _, u in user_pairs}
    w, u = models.Workspace, models.User
    workspace_names = dict(s.execute(select(w.id, w.name).where(w.id.in_(workspace_ids))).all())
    usernames = dict(s.execute(select(u.id, u.username).where(u.id.in_(user_ids))).all())
    for group in workspaces:
        group.name = f"workspace '{workspace_names.get(int(group.key), group.key)}'"
    for (workspace_id, user_id), group in zip(user_pairs, users, strict=True):
        group.name = (
            f"user '{usernames.get(user_id, user_id)}' in workspace "
            f"'{workspace_names.get(workspace_id, workspace_id)}'"
        )


# Built once: every snapshot of the scheduling view reads it.
_SETTINGS_OF_POOLS = select(models.PoolShare).where(
    models.PoolShare.pool_name.in_(bindparam("pools", expanding=True))
)


def share_groups(
    s: Session, pools: tuple[PoolSettings, ...], now: datetime
) -> dict[str, tuple[list[pb.ShareGroup], list[pb.ShareGroup]]]:
    """For each fair-share pool: its workspaces' and users' groups (those with a setting or recent
    usage); for each priority pool with quotas: the groups that have one; in key order."""
    if not pools:
        return {}
    settings = list(s.scalars(_SETTINGS_OF_POOLS, {"pools": [p.name for p in pools]}))
    groups: dict[str, tuple[list[pb.ShareGroup], list[pb.ShareGroup]]] = {}
    for pool in pools:
        workspaces: dict[str, pb.ShareGroup] = {}
        users: dict[str, pb.ShareGroup] = {}
        if pool.scheduler_type == "fair_share":
            ws_usage, user_usage = _usage(s, pool, now)
            for key, used in ws_usage.items():
                workspaces[key] = pb.ShareGroup(key=key, recent_slot_seconds=round(used, 1))
            for key, used in user_usage.items():
                users[key] = pb.ShareGroup(key=key, recent_slot_seconds=round(used, 1))
            for workspace_id, owner_id in _live_groups(s, pool):
                workspaces.setdefault(
                    workspace_key(workspace_id), pb.ShareGroup(key=workspace_key(workspace_id))
                )
                key = user_key(workspace_id, owner_id)
                users.setdefault(key, pb.ShareGroup(key=key))
        for row in settings:
            if row.pool_name != pool.name:
                continue
            if pool.scheduler_type != "fair_share" and not (row.guaranteed_slots or row.max_slots):
                continue  # a priority pool divides by no weight: a setting without a quota is nothing
            if row.user_id:
                group = users.setdefault(user_key(row.workspace_id, row.user_id), pb.ShareGroup())
                group.key = user_key(row.workspace_id, row.user_id)
            else:
                group = workspaces.setdefault(workspace_key(row.workspace_id), pb.ShareGroup())
                group.key = workspace_key(row.workspace_id)
            group.weight, group.guaranteed_slots, group.max_slots = (
                row.weight,
                row.guaranteed_slots,
                row.max_slots,
            )
        if not (workspaces or users):
            continue
        groups[pool.name] = (
            [workspaces[k] for k in sorted(workspaces)],
            [users[k] for k in sorted(users)],
        )
    if groups:
        _name_groups(
            s,
            [group for workspaces, _ in groups.values() for group in workspaces],
            [group for _, users in groups.values() for group in users],
        )
    return groups


def guarantees_set(groups: dict[str, tuple[list[pb.ShareGroup], list[pb.ShareGroup]]]) -> set[str]:
    """The pools where a group has a guarantee (reclaimed for it: the pool's minimum run applies)."""
    return {
        pool
        for pool, (workspaces, users) in groups.items()
        if any(g.guaranteed_slots for g in (*workspaces, *users))
    }
