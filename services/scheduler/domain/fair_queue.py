"""A fair-share pool's slotted requests as its pass reads them, kept up to date request by request
(fair_share.py says what the pass does with them).

A session keeps one per fair-share pool between passes and changes it with each request added,
removed, started or ended; `schedule` builds one for its single pass. Either way the pass reads the
same thing, so a session's decision is the whole decision. What is kept, so that a pass costs what
it does rather than the length of the queue:
- pending requests filed by workspace, user, job and shape, each bucket in queue order: the pass
  takes them from the buckets' fronts, and labels the ones it does not look at one by one by
  workspace, user and shape (`GroupTail`);
- the slots each workspace, user and job wants (running and pending) and holds (running);
- the work that may be reclaimed (preemptible running work) by workspace, user and agent, oldest
  placed first; work placed after the pool's `protect_started_after` is the young end of each list;
- each level's last division (`shares.divide`, a hundred bisection steps over the siblings), used
  again while what it divides and among whom is unchanged: a pool has few workspaces and users, but
  it may have thousands of jobs, and one change moves the division of one user's jobs at most.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from services.scheduler.domain.model import (
    AllocationRequest,
    GroupShare,
    PoolShares,
    ResourcePool,
    ShareGroup,
)
from services.scheduler.domain.ordering import QueueKey, queue_key
from services.scheduler.domain.priority_pass import Shape, shape_of
from services.scheduler.domain.quotas import group_name, user_of, workspace_of
from services.scheduler.domain.shares import Claim, divide, usage_adjusted

K = TypeVar("K")

# A pending request's place: the requests of one user (in one workspace) of one shape. A pass that
# stops looking at requests one by one gives every one of a place the same reason.
Place = tuple[str, str, Shape]
# Pending requests of one job and shape, in queue order.
Bucket = list[tuple[QueueKey, AllocationRequest]]
# Running work, oldest placed first: (placed at, allocation id, the request).
Candidates = list[tuple[int, str, AllocationRequest]]


class Tally(Protocol):
    """Slots counted by group key; 0 for a key never counted."""

    def __getitem__(self, key: str, /) -> int: ...


def place_of(request: AllocationRequest) -> Place:
    return (workspace_of(request), user_of(request), shape_of(request))


def _weight(value: float) -> float:
    return value if value > 0 else 1.0


@dataclass(frozen=True)
class Entitlements:
    """Whole-slot fair shares of one pool, by workspace, user and job key."""

    workspace: Mapping[str, int]
    user: Mapping[str, int]
    job: Mapping[str, int]


class UserQueue:
    """One user's pending requests in one workspace: job -> shape -> bucket."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[Shape, Bucket]] = {}
        # How many wait, of each shape and in all.
        self.shapes: Counter[Shape] = Counter()
        self.count = 0
        # A request of each shape standing for all (fair_share._stand_in).
        self.stand_ins: dict[Shape, AllocationRequest] = {}

    def members(self, shape: Shape, excluded: frozenset[str]) -> Iterator[AllocationRequest]:
        for shapes in self.jobs.values():
            for _, request in shapes.get(shape, ()):
                if request.allocation_id not in excluded:
                    yield request


@dataclass(frozen=True)
class GroupTail:
    """The pending requests of one place that a pass did not look at one by one (all of the place
    but `excluded`), all waiting for `reason`."""

    place: Place
    queue: UserQueue
    excluded: frozenset[str]
    reason: str

    def members(self) -> Iterator[AllocationRequest]:
        return self.queue.members(self.place[2], self.excluded)


def _claims(
    demand: Mapping[str, int], groups: Mapping[str, ShareGroup], adjust_by_usage: bool
) -> list[Claim]:
    weights = {key: _weight(groups[key].weight) if key in groups else 1.0 for key in demand}
    if adjust_by_usage:
        usage = {key: groups[key].recent_slot_seconds for key in demand if key in groups}
        weights = usage_adjusted(weights, usage)
    claims = []
    for key, wanted in sorted(demand.items()):
        group = groups.get(key)
        claims.append(
            Claim(
                key=key,
                weight=weights[key],
                demand=wanted,
                guaranteed=group.guaranteed_slots if group else 0,
                cap=group.max_slots if group and group.max_slots > 0 else None,
            )
        )
    return claims


def _change(counter: Counter[K], key: K, by: int) -> bool:
    """Change a count; whether the key came or went. Counters here hold no zeros: a group that
    wants nothing is not a sibling in any division."""
    value = counter[key] + by
    if value:
        counter[key] = value
        return value == by
    del counter[key]
    return True


def _insert(candidates: Candidates, request: AllocationRequest) -> None:
    bisect.insort(candidates, (request.started_at_ns, request.allocation_id, request))


def _delete(candidates: Candidates, request: AllocationRequest) -> None:
    at = bisect.bisect_left(candidates, (request.started_at_ns, request.allocation_id))
    del candidates[at]


class FairQueue:
    """The slotted requests of one fair-share pool (running and pending)."""

    def __init__(self, pool: ResourcePool, requests: Iterable[AllocationRequest] = ()) -> None:
        # Only its default priority is read here (queue order); the rest is the pass's to read.
        self.pool = pool
        self.tree: dict[str, dict[str, UserQueue]] = {}
        self.pending_by_workspace: Counter[str] = Counter()
        # Slots wanted (running and pending): by workspace; by user within a workspace (what the
        # users of a workspace divide); by user; by job within a user, with the weights its
        # requests carry (the job's weight is the largest).
        self.wanted_workspace: Counter[str] = Counter()
        self.wanted_user_in: dict[str, Counter[str]] = defaultdict(Counter)
        self.wanted_user: Counter[str] = Counter()
        self.wanted_job_in: dict[str, Counter[str]] = defaultdict(Counter)
        self._job_weights: dict[str, dict[str, Counter[float]]] = defaultdict(lambda: defaultdict(Counter))
        # Slots held by running work.
        self.held_workspace: Counter[str] = Counter()
        self.held_user: Counter[str] = Counter()
        self.held_job: Counter[str] = Counter()
        # Preemptible running work, oldest placed first.
        self.by_workspace: dict[str, Candidates] = {}
        self.by_user: dict[str, Candidates] = {}
        self.on_agent: dict[str, Candidates] = {}
        # The last divisions, each with what it divided and among whom (the groups' settings):
        # the workspaces', each workspace's users', each user's jobs' (added up by job: a job's
        # share), the nominal ones; and what changed since: whose wants, whether a group came or
        # went.
        self._workspace_division: tuple[tuple[int, tuple[ShareGroup, ...]], dict[str, int]] | None = None
        self._user_division: dict[str, tuple[tuple[int, tuple[ShareGroup, ...]], dict[str, int]]] = {}
        self._job_division: dict[str, tuple[int, dict[str, int]]] = {}
        self._job_share: Counter[str] = Counter()
        self._nominal: tuple[tuple[object, ...], dict[str, int], dict[str, int]] | None = None
        self._workspaces_changed = True
        self._users_changed_in: set[str] = set()
        self._jobs_changed_of: set[str] = set()
        self._groups_changed = True
        self._add_all(requests)

    # -- changes -------------------------------------------------------------------------------

    def add(self, request: AllocationRequest) -> None:
        self._count(request, 1)
        if request.running:
            self._hold(request, 1)
            return
        ws, user = workspace_of(request), user_of(request)
        queue = self.tree.setdefault(ws, {}).setdefault(user, UserQueue())
        shape = shape_of(request)
        bucket = queue.jobs.setdefault(request.job_key, {}).setdefault(shape, [])
        bisect.insort(bucket, (queue_key(request, self.pool), request))
        queue.shapes[shape] += 1
        queue.count += 1
        self.pending_by_workspace[ws] += 1

    def _add_all(self, requests: Iterable[AllocationRequest]) -> None:
        """`add` for many at once: each list sorted once, not kept sorted request by request."""
        unsorted: list[list[Any]] = []
        for request in requests:
            ws, user, job, slots = (
                workspace_of(request),
                user_of(request),
                request.job_key,
                request.slots_needed,
            )
            self.wanted_workspace[ws] += slots
            self.wanted_user_in[ws][user] += slots
            self.wanted_user[user] += slots
            self.wanted_job_in[user][job] += slots
            self._job_weights[user][job][_weight(request.weight)] += 1
            self._users_changed_in.add(ws)
            self._jobs_changed_of.add(user)
            if request.running:
                self.held_workspace[ws] += slots
                self.held_user[user] += slots
                self.held_job[job] += slots
                if not request.preemptible:
                    continue
                entry = (request.started_at_ns, request.allocation_id, request)
                for index, key in self._indexes(request):
                    candidates = index.setdefault(key, [])
                    if not candidates:
                        unsorted.append(candidates)
                    candidates.append(entry)
                continue
            queue = self.tree.setdefault(ws, {}).setdefault(user, UserQueue())
            shape = shape_of(request)
            bucket = queue.jobs.setdefault(job, {}).setdefault(shape, [])
            if not bucket:
                unsorted.append(bucket)
            bucket.append((queue_key(request, self.pool), request))
            queue.shapes[shape] += 1
            queue.count += 1
            self.pending_by_workspace[ws] += 1
        for entries in unsorted:
            entries.sort()

    def _indexes(self, request: AllocationRequest) -> list[tuple[dict[str, Candidates], str]]:
        """The victim lists a running preemptible request is in."""
        lists = [(self.by_workspace, workspace_of(request)), (self.by_user, user_of(request))]
        lists += [(self.on_agent, agent) for agent in dict.fromkeys(p.agent_id for p in request.placements)]
        return lists

    def remove(self, request: AllocationRequest) -> None:
        """Remove `request`, as it was added."""
        self._count(request, -1)
        if request.running:
            self._hold(request, -1)
            return
        ws, user = workspace_of(request), user_of(request)
        users = self.tree[ws]
        queue = users[user]
        shape = shape_of(request)
        shapes = queue.jobs[request.job_key]
        bucket = shapes[shape]
        del bucket[bisect.bisect_left(bucket, (queue_key(request, self.pool),))]
        if not bucket:
            del shapes[shape]
            if not shapes:
                del queue.jobs[request.job_key]
        _change(queue.shapes, shape, -1)
        queue.count -= 1
        _change(self.pending_by_workspace, ws, -1)
        if not queue.count:
            del users[user]
            if not users:
                del self.tree[ws]

    def _count(self, request: AllocationRequest, sign: int) -> None:
        ws, user, job, slots = workspace_of(request), user_of(request), request.job_key, request.slots_needed
        came_or_went = _change(self.wanted_workspace, ws, sign * slots)
        came_or_went |= _change(self.wanted_user_in[ws], user, sign * slots)
        if not self.wanted_user_in[ws]:
            del self.wanted_user_in[ws]
        came_or_went |= _change(self.wanted_user, user, sign * slots)
        _change(self.wanted_job_in[user], job, sign * slots)
        if not self.wanted_job_in[user]:
            del self.wanted_job_in[user]
        weights = self._job_weights[user][job]
        _change(weights, _weight(request.weight), sign)
        if not weights:
            del self._job_weights[user][job]
            if not self._job_weights[user]:
                del self._job_weights[user]
        self._workspaces_changed = True
        self._users_changed_in.add(ws)
        self._jobs_changed_of.add(user)
        self._groups_changed |= came_or_went

    def _hold(self, request: AllocationRequest, sign: int) -> None:
        ws, user, slots = workspace_of(request), user_of(request), request.slots_needed
        _change(self.held_workspace, ws, sign * slots)
        _change(self.held_user, user, sign * slots)
        _change(self.held_job, request.job_key, sign * slots)
        if not request.preemptible:
            return
        for index, key in self._indexes(request):
            if sign > 0:
                _insert(index.setdefault(key, []), request)
            else:
                _delete(index[key], request)
                if not index[key]:
                    del index[key]

    # -- the division --------------------------------------------------------------------------

    def entitlements(self, pool: ResourcePool, total: int) -> Entitlements:
        """The shares of `total` slots among the pool's slotted requests (running and pending):
        among workspaces, then each workspace's among its users, then each user's among its jobs.
        (A user key found in two workspaces gets the share of the later one in key order; a job
        key found with two users, the sum of its shares.) A division is made again only when
        what it divides, among whom, or their settings changed."""
        key = (total, pool.workspaces)
        if self._workspace_division is None or self._workspaces_changed or self._workspace_division[0] != key:
            workspaces = {g.key: g for g in pool.workspaces}
            claims = _claims(self.wanted_workspace, workspaces, adjust_by_usage=True)
            self._workspace_division = (key, divide(total, claims))
            self._workspaces_changed = False
        ws_share = self._workspace_division[1]
        users: dict[str, ShareGroup] | None = None
        user_share: dict[str, int] = {}
        for ws in sorted(self.wanted_user_in):
            key = (ws_share.get(ws, 0), pool.users)
            last = self._user_division.get(ws)
            if last is None or ws in self._users_changed_in or last[0] != key:
                users = users if users is not None else {g.key: g for g in pool.users}
                claims = _claims(self.wanted_user_in[ws], users, adjust_by_usage=True)
                last = self._user_division[ws] = (key, divide(key[0], claims))
            user_share.update(last[1])
        for ws in self._users_changed_in:
            if ws not in self.wanted_user_in:
                self._user_division.pop(ws, None)
        self._users_changed_in.clear()
        for user, wanted in self.wanted_job_in.items():
            share = user_share.get(user, 0)
            last_jobs = self._job_division.get(user)
            if last_jobs is not None and last_jobs[0] == share and user not in self._jobs_changed_of:
                continue
            self._forget_jobs(user)
            weights = self._job_weights[user]
            job_claims = [
                Claim(key=job, weight=max(weights[job]), demand=n) for job, n in sorted(wanted.items())
            ]
            result = divide(share, job_claims)
            for job, slots in result.items():
                _change(self._job_share, job, slots)
            self._job_division[user] = (share, result)
        for user in self._jobs_changed_of:
            if user not in self.wanted_job_in:
                self._forget_jobs(user)
        self._jobs_changed_of.clear()
        return Entitlements(ws_share, user_share, self._job_share)

    def _forget_jobs(self, user: str) -> None:
        last = self._job_division.pop(user, None)
        if last is not None:
            for job, slots in last[1].items():
                _change(self._job_share, job, -slots)

    def nominal(self, pool: ResourcePool, total: int) -> tuple[dict[str, int], dict[str, int]]:
        """Each workspace's and user's share by weight alone, were every group present to want
        the whole pool: made again only when a group came or went, or the settings changed."""
        # Recent usage, which moves on most passes, plays no part here.
        key = (total, _settings(pool.workspaces), _settings(pool.users))
        if self._nominal is None or self._groups_changed or self._nominal[0] != key:
            workspaces = {g.key: g for g in pool.workspaces}
            users = {g.key: g for g in pool.users}
            everything = dict.fromkeys(self.wanted_workspace, total)
            ws_nominal = divide(total, _claims(everything, workspaces, adjust_by_usage=False))
            user_nominal: dict[str, int] = {}
            for ws, members in sorted(self.wanted_user_in.items()):
                claims = _claims(dict.fromkeys(members, total), users, adjust_by_usage=False)
                user_nominal.update(divide(ws_nominal.get(ws, 0), claims))
            self._nominal = (key, ws_nominal, user_nominal)
            self._groups_changed = False
        return self._nominal[1], self._nominal[2]

    def division(
        self,
        pool: ResourcePool,
        total: int,
        shares: Entitlements,
        held: tuple[Tally, Tally],
    ) -> PoolShares:
        """The pool's division as people read it: per workspace and user, the nominal share, the
        entitlement now, the slots held (`held`: by workspace, by user) and wanted."""
        workspaces = {g.key: g for g in pool.workspaces}
        users = {g.key: g for g in pool.users}
        ws_nominal, user_nominal = self.nominal(pool, total)

        def report(
            wanted: Mapping[str, int],
            groups: dict[str, ShareGroup],
            kind: str,
            nominal: Mapping[str, int],
            entitled: Mapping[str, int],
            holding: Tally,
        ) -> tuple[GroupShare, ...]:
            return tuple(
                GroupShare(
                    key=key,
                    name=group_name(groups, key, kind),
                    nominal_slots=nominal.get(key, 0),
                    entitled_slots=entitled.get(key, 0),
                    held_slots=holding[key],
                    wanted_slots=wanted[key],
                )
                for key in sorted(wanted)
            )

        return PoolShares(
            resource_pool=pool.name,
            workspaces=report(
                self.wanted_workspace, workspaces, "workspace", ws_nominal, shares.workspace, held[0]
            ),
            users=report(self.wanted_user, users, "user", user_nominal, shares.user, held[1]),
        )


def _settings(groups: tuple[ShareGroup, ...]) -> tuple[tuple[str, float, int, int], ...]:
    return tuple((g.key, g.weight, g.guaranteed_slots, g.max_slots) for g in groups)
