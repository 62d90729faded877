"""Quotas per pool, for a workspace and for a user in it (ShareGroup's `guaranteed_slots` and
`max_slots`, set by an admin with `cairn workspace set-quota`): the rules every kind of pool keeps,
written once. A fair-share pool (fair_share.py) and a priority pool (quota_pass.py) both ask here.

- A maximum is never exceeded: a request that would take its workspace or its user past a maximum
  waits, its reason naming the quota (`over_maximum`); a group over its maximum (an admin lowered
  it) gives back its youngest placements, gracefully preempted (`over_maximums`).
- No preemption takes a group below its guarantee (`keeps_guarantees`): the slots a group is
  guaranteed are never taken from it, whoever asks. How a guarantee is given is the pass's own: a
  fair-share pool makes it part of the shares (shares.py); a priority pool places the work of a
  group below its guarantee first and reclaims for it (quota_pass.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.scheduler.domain import reasons
from services.scheduler.domain.model import AllocationRequest, ResourcePool, ShareGroup

_NO_WORKSPACE = "-"


def workspace_of(request: AllocationRequest) -> str:
    return request.workspace or _NO_WORKSPACE


def user_of(request: AllocationRequest) -> str:
    return request.user or f"{workspace_of(request)}/-"


class HeldSlots(Protocol):
    """The slots each workspace and user holds in the pool during a pass (by ShareGroup key)."""

    @property
    def workspace(self) -> Mapping[str, int]: ...

    @property
    def user(self) -> Mapping[str, int]: ...


@dataclass(frozen=True)
class Gap:
    """A group below its guarantee: which one, what it holds and is guaranteed."""

    kind: str  # "workspace" or "user"
    key: str
    name: str
    held: int
    guaranteed: int

    def covers(self, request: AllocationRequest) -> bool:
        """Whether `request` is work of this group."""
        return (workspace_of(request) if self.kind == "workspace" else user_of(request)) == self.key


def group_name(groups: Mapping[str, ShareGroup], key: str, kind: str) -> str:
    group = groups.get(key)
    return group.name if group is not None and group.name else f"{kind} '{key}'"


class Quotas:
    """A pool's quotas, by workspace and user."""

    def __init__(self, pool: ResourcePool) -> None:
        self.pool_name = pool.name
        self.workspaces = {g.key: g for g in pool.workspaces}
        self.users = {g.key: g for g in pool.users}

    @staticmethod
    def set_in(pool: ResourcePool) -> bool:
        """Whether any workspace or user has a guarantee or a maximum in `pool`."""
        return any(g.max_slots > 0 or g.guaranteed_slots > 0 for g in (*pool.workspaces, *pool.users))

    def _levels(
        self, request: AllocationRequest, held: HeldSlots
    ) -> Iterator[tuple[str, str, ShareGroup | None, Mapping[str, int]]]:
        """The request's workspace, then its user: (kind, key, its quota if any, holdings)."""
        ws, user = workspace_of(request), user_of(request)
        yield "workspace", ws, self.workspaces.get(ws), held.workspace
        yield "user", user, self.users.get(user), held.user

    def name(self, kind: str, key: str) -> str:
        return group_name(self.workspaces if kind == "workspace" else self.users, key, kind)

    def over_maximum(self, request: AllocationRequest, held: HeldSlots) -> str | None:
        """Why `request` may not start: its workspace's or user's maximum (the first it would
        pass), in words naming the quota; None when it stays within both."""
        for kind, key, group, holding in self._levels(request, held):
            now = holding.get(key, 0)
            if group is not None and group.max_slots > 0 and now + request.slots_needed > group.max_slots:
                return reasons.over_quota(self.name(kind, key), now, group.max_slots, self.pool_name)
        return None

    def over_maximums(
        self, running: Sequence[AllocationRequest], held: HeldSlots, preempted: set[str]
    ) -> list[AllocationRequest]:
        """What a group holding more than its maximum (an admin lowered it) gives back: its youngest
        preemptible placements until it holds no more (workspaces first, then users). Each is
        added to `preempted`, which holds what is already given back."""
        victims: list[AllocationRequest] = []
        for groups, group_of, holding in (
            (self.workspaces, workspace_of, held.workspace),
            (self.users, user_of, held.user),
        ):
            over = {
                key: holding.get(key, 0) - group.max_slots
                for key, group in groups.items()
                if group.max_slots > 0 and holding.get(key, 0) > group.max_slots
            }
            if not over:
                continue
            for candidate in sorted(running, key=lambda c: (-c.started_at_ns, c.allocation_id)):
                key = group_of(candidate)
                if over.get(key, 0) <= 0 or not candidate.preemptible or candidate.allocation_id in preempted:
                    continue
                preempted.add(candidate.allocation_id)
                victims.append(candidate)
                over[key] -= candidate.slots_needed
        return victims

    def within_guarantee(self, request: AllocationRequest, held: HeldSlots) -> Gap | None:
        """The request's workspace (else its user) when the request fits in what is left of its
        guarantee (as Kueue admits within a nominal quota): such work goes first, and may reclaim.
        Work larger than what is left waits as any other."""
        for kind, key, group, holding in self._levels(request, held):
            now = holding.get(key, 0)
            if group is not None and now + request.slots_needed <= group.guaranteed_slots:
                return Gap(kind, key, self.name(kind, key), now, group.guaranteed_slots)
        return None

    def keeps_guarantees(
        self,
        victim: AllocationRequest,
        for_request: AllocationRequest,
        chosen: Iterable[AllocationRequest],
        held: HeldSlots,
    ) -> bool:
        """Whether preempting `victim` besides `chosen` (for `for_request`, which takes their place)
        leaves each of the victim's groups at or above its guarantee, or no lower than it holds
        now: a group's guaranteed slots are never taken from it, whoever asks."""
        taken = [*chosen, victim]
        for kind, key, group, holding in self._levels(victim, held):
            if group is None or group.guaranteed_slots <= 0:
                continue
            group_of = workspace_of if kind == "workspace" else user_of
            now = holding.get(key, 0)
            after = now - sum(c.slots_needed for c in taken if group_of(c) == key)
            if group_of(for_request) == key:
                after += for_request.slots_needed
            if after < min(group.guaranteed_slots, now):
                return False
        return True
