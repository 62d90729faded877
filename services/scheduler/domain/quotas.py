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

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from services.scheduler.domain import reasons
from services.scheduler.domain.model import AllocationRequest, ResourcePool, ShareGroup

_NO_WORKSPACE = "-"


def workspace_of(request: AllocationRequest) -> str:
    return request.workspace or _NO_WORKSPACE


def user_of(request: AllocationRequest) -> str:
    return request.user or f"{workspace_of(request)}/-"


class Tally(Protocol):
    """Slots by group key; a group that holds nothing counts 0 (a Counter, or a pass's own)."""

    def __getitem__(self, key: str, /) -> int: ...


class HeldSlots(Protocol):
    """The slots each workspace and user holds in the pool during a pass (by ShareGroup key)."""

    @property
    def workspace(self) -> Tally: ...

    @property
    def user(self) -> Tally: ...


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
        # The groups with a maximum: what over_maximum_of looks in, once per request it weighs.
        self.capped_workspaces = {key: g for key, g in self.workspaces.items() if g.max_slots > 0}
        self.capped_users = {key: g for key, g in self.users.items() if g.max_slots > 0}

    @staticmethod
    def set_in(pool: ResourcePool) -> bool:
        """Whether any workspace or user has a guarantee or a maximum in `pool`."""
        return any(g.max_slots > 0 or g.guaranteed_slots > 0 for g in (*pool.workspaces, *pool.users))

    def _levels(
        self, request: AllocationRequest, held: HeldSlots
    ) -> Iterator[tuple[str, str, ShareGroup | None, Tally]]:
        """The request's workspace, then its user: (kind, key, its quota if any, holdings)."""
        ws, user = workspace_of(request), user_of(request)
        yield "workspace", ws, self.workspaces.get(ws), held.workspace
        yield "user", user, self.users.get(user), held.user

    def name(self, kind: str, key: str) -> str:
        return group_name(self.workspaces if kind == "workspace" else self.users, key, kind)

    def over_maximum(self, request: AllocationRequest, held: HeldSlots) -> str | None:
        """Why `request` may not start: its workspace's or user's maximum (the first it would
        pass), in words naming the quota; None when it stays within both."""
        return self.over_maximum_of(workspace_of(request), user_of(request), request.slots_needed, held)

    def over_maximum_of(self, ws: str, user: str, slots: int, held: HeldSlots) -> str | None:
        """As over_maximum, for `slots` more of workspace `ws` and user `user`: a fair-share pass
        asks so for a whole user's waiting requests of one shape at once."""
        for capped, key, holding, kind in (
            (self.capped_workspaces, ws, held.workspace, "workspace"),
            (self.capped_users, user, held.user, "user"),
        ):
            group = capped.get(key)
            if group is not None:
                now = holding[key]
                if now + slots > group.max_slots:
                    return reasons.over_quota(
                        group_name(capped, key, kind), now, group.max_slots, self.pool_name
                    )
        return None

    def over_maximums(
        self,
        held: HeldSlots,
        preempted: set[str],
        placements_of: Callable[[str, Collection[str]], Iterable[AllocationRequest]],
    ) -> list[AllocationRequest]:
        """What a group holding more than its maximum (an admin lowered it) gives back: its youngest
        preemptible placements until it holds no more (workspaces first, then users).
        `placements_of(kind, keys)` gives the running placements of those groups (it may give
        more: others are passed over). Each victim is added to `preempted`, which holds what is
        already given back."""
        victims: list[AllocationRequest] = []
        for kind, capped, group_of, holding in (
            ("workspace", self.capped_workspaces, workspace_of, held.workspace),
            ("user", self.capped_users, user_of, held.user),
        ):
            over = {
                key: holding[key] - group.max_slots
                for key, group in capped.items()
                if holding[key] > group.max_slots
            }
            if not over:
                continue
            candidates = placements_of(kind, over.keys())
            for candidate in sorted(candidates, key=lambda c: (-c.started_at_ns, c.allocation_id)):
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
            now = holding[key]
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
            now = holding[key]
            after = now - sum(c.slots_needed for c in taken if group_of(c) == key)
            if group_of(for_request) == key:
                after += for_request.slots_needed
            if after < min(group.guaranteed_slots, now):
                return False
        return True
