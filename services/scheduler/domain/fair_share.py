"""One pass of the fair-share scheduler over one pool's slotted requests (zero-slot work holds no
slots to share: it keeps the priority pass).

The pool's slots are divided in three levels (shares.py): among the workspaces that want slots, by
their weights lowered by their recent usage, with their quotas; each workspace's share among its
users the same way; each user's among their jobs by the jobs' weights (`resources.weight`). Those
whole-slot shares are the entitlements. Then, in one pass:

1. Pending requests are taken most deprived first: the workspace holding the smallest part of its
   share, in it the user holding the smallest part of theirs, then that user's jobs by priority
   (priority orders work within one user's share) and the smallest part of their share, and queue
   order. A request that keeps its workspace and user within their shares starts where it fits.
   One that does not fit reclaims: running preemptible work of workspaces (or, within its own
   workspace, users) holding more than their share is preempted, the oldest-placed first, never
   taking a group below its share and always a whole allocation (a gang is never split), nor work
   placed after the pool's `protect_started_after` (a minimum run before reclaim, so that shares
   moving with recent usage do not preempt what has barely started; a gang that fits on one agent
   takes its victims from one agent); the request is reserved in the room made and starts on a
   later pass, once they release. If nothing
   can be reclaimed it waits, and the pool keeps its free slots for it (no starvation).
2. Idle slots are lent: when no request within its share is left waiting, requests beyond their
   share start where they fit, in the same order. What they borrow is what step 1 reclaims.
3. A quota's maximum is never exceeded, lent slots included; its guarantee is part of the shares
   (the quotas' rules, which a priority pool keeps too, are quotas.py's).
   A group over its maximum (an admin lowered it) gives back its youngest placements, preempted
   for no request in particular (Preemption.for_allocation_id is empty).

As in the priority pass, once a preemption is chosen nothing more starts in the pass: the slots
being freed belong to the request that asked for them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from services.scheduler.domain import reasons
from services.scheduler.domain.capacity import PoolCapacity
from services.scheduler.domain.fitting import apply_fit, find_fit
from services.scheduler.domain.model import (
    AllocationRequest,
    GroupShare,
    PoolShares,
    Preemption,
    ResourcePool,
    ShareGroup,
)
from services.scheduler.domain.ordering import QueueKey, effective_priority, queue_key
from services.scheduler.domain.priority_pass import PassOutcome, Shape, shape_of
from services.scheduler.domain.quotas import Quotas, user_of, workspace_of
from services.scheduler.domain.quotas import group_name as _name
from services.scheduler.domain.reasons import PoolFacts
from services.scheduler.domain.shares import Claim, divide, usage_adjusted


@dataclass(frozen=True)
class Entitlements:
    """Whole-slot fair shares of one pool, by workspace, user and job key."""

    workspace: dict[str, int]
    user: dict[str, int]
    job: dict[str, int]


def _weight(value: float) -> float:
    return value if value > 0 else 1.0


def _claims(demand: dict[str, int], groups: dict[str, ShareGroup], adjust_by_usage: bool) -> list[Claim]:
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


def entitlements(pool: ResourcePool, total: int, requests: Iterable[AllocationRequest]) -> Entitlements:
    """The shares of `total` slots among the slotted `requests` (running and pending) of `pool`."""
    workspaces = {g.key: g for g in pool.workspaces}
    users = {g.key: g for g in pool.users}
    ws_demand: dict[str, int] = defaultdict(int)
    user_demand: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    job_demand: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    job_weight: dict[str, float] = {}
    for r in requests:
        ws, user = workspace_of(r), user_of(r)
        ws_demand[ws] += r.slots_needed
        user_demand[ws][user] += r.slots_needed
        job_demand[user][r.job_key] += r.slots_needed
        job_weight.setdefault(r.job_key, _weight(r.weight))
    ws_share = divide(total, _claims(ws_demand, workspaces, adjust_by_usage=True))
    user_share: dict[str, int] = {}
    for ws, demand in user_demand.items():
        user_share.update(divide(ws_share.get(ws, 0), _claims(demand, users, adjust_by_usage=True)))
    job_share: dict[str, int] = {}
    for user, demand in job_demand.items():
        claims = [Claim(key=job, weight=job_weight[job], demand=n) for job, n in sorted(demand.items())]
        job_share.update(divide(user_share.get(user, 0), claims))
    return Entitlements(ws_share, user_share, job_share)


def division(
    pool: ResourcePool,
    total: int,
    requests: Sequence[AllocationRequest],
    shares: Entitlements,
    held: _Held,
) -> PoolShares:
    """The pool's division as people read it: per workspace and user, the nominal share (by weight
    alone, were every group present to want the whole pool), the entitlement now, the slots held
    and wanted."""
    workspaces = {g.key: g for g in pool.workspaces}
    users = {g.key: g for g in pool.users}
    ws_wanted: dict[str, int] = defaultdict(int)
    user_wanted: dict[str, int] = defaultdict(int)
    users_of: dict[str, set[str]] = defaultdict(set)
    for r in requests:
        ws_wanted[workspace_of(r)] += r.slots_needed
        user_wanted[user_of(r)] += r.slots_needed
        users_of[workspace_of(r)].add(user_of(r))
    everything = dict.fromkeys(ws_wanted, total)
    ws_nominal = divide(total, _claims(everything, workspaces, adjust_by_usage=False))
    user_nominal: dict[str, int] = {}
    for ws, members in users_of.items():
        claims = _claims(dict.fromkeys(members, total), users, adjust_by_usage=False)
        user_nominal.update(divide(ws_nominal.get(ws, 0), claims))

    def report(
        keys: Iterable[str],
        groups: dict[str, ShareGroup],
        kind: str,
        nominal: dict[str, int],
        entitled: dict[str, int],
        holding: dict[str, int],
        wanted: dict[str, int],
    ) -> tuple[GroupShare, ...]:
        return tuple(
            GroupShare(
                key=key,
                name=_name(groups, key, kind),
                nominal_slots=nominal.get(key, 0),
                entitled_slots=entitled.get(key, 0),
                held_slots=holding.get(key, 0),
                wanted_slots=wanted.get(key, 0),
            )
            for key in sorted(keys)
        )

    return PoolShares(
        resource_pool=pool.name,
        workspaces=report(
            ws_wanted, workspaces, "workspace", ws_nominal, shares.workspace, held.workspace, ws_wanted
        ),
        users=report(user_wanted, users, "user", user_nominal, shares.user, held.user, user_wanted),
    )


class _Held:
    """Slots held by each workspace, user and job during the pass."""

    def __init__(self, running: Iterable[AllocationRequest]) -> None:
        self.workspace: dict[str, int] = defaultdict(int)
        self.user: dict[str, int] = defaultdict(int)
        self.job: dict[str, int] = defaultdict(int)
        for r in running:
            self.add(r, r.slots_needed)

    def add(self, r: AllocationRequest, slots: int) -> None:
        self.workspace[workspace_of(r)] += slots
        self.user[user_of(r)] += slots
        self.job[r.job_key] += slots

    def copy(self) -> _Held:
        held = _Held(())
        held.workspace.update(self.workspace)
        held.user.update(self.user)
        held.job.update(self.job)
        return held


def _part(held: int, share: int) -> float:
    """How much of its share a group holds: smaller goes first; no share at all goes last."""
    return held / share if share > 0 else float("inf")


class _Order:
    """Pending requests, taken most deprived first (module docstring, step 1)."""

    def __init__(self, pool: ResourcePool, pending: Iterable[AllocationRequest]) -> None:
        self._pool = pool
        # workspace -> user -> job -> its requests, best (priority, queue key) last.
        self._tree: dict[str, dict[str, dict[str, list[tuple[int, QueueKey, AllocationRequest]]]]] = {}
        for r in pending:
            jobs = self._tree.setdefault(workspace_of(r), {}).setdefault(user_of(r), {})
            jobs.setdefault(r.job_key, []).append((effective_priority(r, pool), queue_key(r, pool), r))
        for users in self._tree.values():
            for jobs in users.values():
                for queue in jobs.values():
                    queue.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)

    def take(self, held: _Held, shares: Entitlements) -> AllocationRequest | None:
        if not self._tree:
            return None
        ws = min(self._tree, key=lambda k: (_part(held.workspace[k], shares.workspace.get(k, 0)), k))
        users = self._tree[ws]
        user = min(users, key=lambda k: (_part(held.user[k], shares.user.get(k, 0)), k))
        jobs = users[user]
        job = min(
            jobs,
            key=lambda k: (jobs[k][-1][0], _part(held.job[k], shares.job.get(k, 0)), jobs[k][-1][1]),
        )
        _, _, request = jobs[job].pop()
        if not jobs[job]:
            del jobs[job]
            if not jobs:
                del users[user]
                if not users:
                    del self._tree[ws]
        return request


# A gang that fits on one agent reclaims on one agent: at most this many agents are tried (those of
# the oldest reclaimable work first).
_MAX_AGENTS_TRIED = 64


@dataclass(frozen=True)
class _Reclaim:
    """A way to make room: the working state with the victims released and the request placed."""

    capacity: PoolCapacity
    victims: list[AllocationRequest]

    @property
    def slots(self) -> int:
        return sum(v.slots_needed for v in self.victims)

    @property
    def cost(self) -> tuple[int, int]:
        """Fewest slots taken first; between equals, the plan whose youngest victim is oldest."""
        return (self.slots, max((v.started_at_ns for v in self.victims), default=0))


def _only(agent_id: str, trial: PoolCapacity) -> PoolCapacity:
    """A view of a working copy holding only one agent (a fit looked for in it is on that agent)."""
    return PoolCapacity({agent_id: trial.agents[agent_id]})


@dataclass
class _Pass:
    pool: ResourcePool
    facts: PoolFacts
    capacity: PoolCapacity
    running: list[AllocationRequest]
    shares: Entitlements
    held: _Held
    outcome: PassOutcome = field(default_factory=PassOutcome)
    preempted: set[str] = field(default_factory=set)
    first_preemptor: str | None = None
    # Whether each request shape would fit were nothing running (for waiting reasons).
    fits_idle: dict[Shape, bool] = field(default_factory=dict)
    # The working state's changes so far: what was found impossible at a version stays so until
    # the next (a start or a reclaim changes it).
    version: int = 0
    no_place: dict[Shape, int] = field(default_factory=dict)
    no_reclaim: dict[tuple[Shape, str, str], int] = field(default_factory=dict)
    reasons_by_shape: dict[Shape, tuple[int, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workspaces = {g.key: g for g in self.pool.workspaces}
        self.users = {g.key: g for g in self.pool.users}
        self.quotas = Quotas(self.pool)
        # Reclaimable work by workspace and by user, oldest placed first (sorted once a pass), and
        # how much of each list's front is passed for good.
        # The same by agent, the agents of the oldest reclaimable work first.
        self.by_workspace: dict[str, list[AllocationRequest]] = defaultdict(list)
        self.by_user: dict[str, list[AllocationRequest]] = defaultdict(list)
        self.on_agent: dict[str, list[AllocationRequest]] = {}
        for c in sorted(self.running, key=lambda c: (c.started_at_ns, c.allocation_id)):
            if self.reclaimable(c):
                self.by_workspace[workspace_of(c)].append(c)
                self.by_user[user_of(c)].append(c)
                for agent_id in dict.fromkeys(p.agent_id for p in c.placements):
                    self.on_agent.setdefault(agent_id, []).append(c)
        self.fronts: dict[tuple[str, str], int] = defaultdict(int)

    def reclaimable(self, c: AllocationRequest) -> bool:
        """Preemptible slotted work that has run long enough (the pool's minimum run before reclaim)."""
        protect = self.pool.protect_started_after_ns
        return c.preemptible and c.slots_needed > 0 and not (protect and c.started_at_ns > protect)

    def workspace_name(self, r: AllocationRequest) -> str:
        return _name(self.workspaces, workspace_of(r), "workspace")

    def over_quota(self, r: AllocationRequest) -> str | None:
        return self.quotas.over_maximum(r, self.held)

    def enforce_maximums(self) -> None:
        """A group holding more than its maximum (an admin lowered it) gives back its youngest
        placements until it holds no more: preempted gracefully, for no request in particular."""
        for victim in self.quotas.over_maximums(self.running, self.held, self.preempted):
            self.outcome.preemptions.append(Preemption(victim.allocation_id, ""))

    def why_not(self, r: AllocationRequest) -> str:
        shape = shape_of(r)
        known = self.reasons_by_shape.get(shape)
        if known is not None and known[0] == self.version:
            return known[1]
        if shape not in self.fits_idle:
            idle = self.capacity.emptied()
            self.fits_idle[shape] = find_fit(r, idle, self.pool.fitting_policy) is not None
        reason = reasons.cannot_fit(r, self.facts, self.capacity, self.fits_idle[shape])
        self.reasons_by_shape[shape] = (self.version, reason)
        return reason

    def within_share(self, r: AllocationRequest) -> bool:
        ws, user = workspace_of(r), user_of(r)
        return self.held.workspace[ws] + r.slots_needed <= self.shares.workspace.get(
            ws, 0
        ) and self.held.user[user] + r.slots_needed <= self.shares.user.get(user, 0)

    def start(self, r: AllocationRequest) -> bool:
        """Start `r` where it fits now; whether it did. While the working state is unchanged
        (`version`), a shape that found no place finds none again: not looked for twice."""
        shape = shape_of(r)
        if self.no_place.get(shape) == self.version:
            return False
        fit = find_fit(r, self.capacity, self.pool.fitting_policy)
        if fit is None:
            self.no_place[shape] = self.version
            return False
        apply_fit(self.capacity, fit, r.allocation_id)
        self.version += 1
        self.held.add(r, r.slots_needed)
        if self.first_preemptor is not None:
            self.outcome.waiting[r.allocation_id] = reasons.held_for_preemption(self.first_preemptor)
        else:
            self.outcome.started.append((r, fit))
        return True

    def _victim_lists(self, r: AllocationRequest) -> list[tuple[str, str]]:
        """Where `r` may reclaim from: the other workspaces' work, and the other users' of its own
        workspace (a user's own jobs are never reclaimed for it). No allocation is in two of them."""
        ws, user = workspace_of(r), user_of(r)
        lists = [("workspace", key) for key in self.by_workspace if key != ws]
        lists += [("user", key) for key in self.by_user if key != user and key.rsplit("/", 1)[0] == ws]
        return lists

    def _takeable(self, victim: AllocationRequest, level: str, key: str, taken: Counter[str]) -> bool:
        """Whether taking `victim` leaves its group (at `level`) at or above its share."""
        if level == "workspace":
            held, share = self.held.workspace[key], self.shares.workspace.get(key, 0)
        else:
            held, share = self.held.user[key], self.shares.user.get(key, 0)
        return held - taken[key] - victim.slots_needed >= share

    def _next_victim(self, level: str, key: str, at: int, taken: Counter[str]) -> int:
        """The index of the group's oldest takeable allocation from `at` on (len: none). Work
        preempted already, and work its group's share keeps while nothing was taken from it in
        this attempt (its holding only falls in this pass), is passed for good."""
        queue = (self.by_workspace if level == "workspace" else self.by_user)[key]
        front = self.fronts[(level, key)]
        at = max(at, front)
        while at < len(queue):
            candidate = queue[at]
            gone = candidate.allocation_id in self.preempted
            if not gone and self._takeable(candidate, level, key, taken):
                return at
            if at == self.fronts[(level, key)] and (gone or not taken[key]):
                self.fronts[(level, key)] = at + 1
            at += 1
        return at

    def _group_of_victim(self, victim: AllocationRequest, r: AllocationRequest) -> tuple[str, str] | None:
        """The level where `victim` and `r` part, and `victim`'s group there: their workspaces, else
        their users; None for `r`'s own user's work (never reclaimed for it)."""
        if workspace_of(victim) != workspace_of(r):
            return ("workspace", workspace_of(victim))
        if user_of(victim) != user_of(r):
            return ("user", user_of(victim))
        return None

    def _plan_across_pool(self, r: AllocationRequest, lists: list[tuple[str, str]]) -> _Reclaim | None:
        """The oldest takeable work across the pool, released until `r` fits."""
        positions = dict.fromkeys(lists, 0)
        trial, victims = self.capacity.copy(), []
        taken: Counter[str] = Counter()
        while True:
            best: tuple[AllocationRequest, tuple[str, str]] | None = None
            for where in lists:
                level, key = where
                positions[where] = self._next_victim(level, key, positions[where], taken)
                queue = (self.by_workspace if level == "workspace" else self.by_user)[key]
                if positions[where] >= len(queue):
                    continue
                head = queue[positions[where]]
                if best is None or (head.started_at_ns, head.allocation_id) < (
                    best[0].started_at_ns,
                    best[0].allocation_id,
                ):
                    best = (head, where)
            if best is None:
                return None
            victim, where = best
            positions[where] += 1
            trial.release(victim.allocation_id)
            taken[where[1]] += victim.slots_needed
            victims.append(victim)
            fit = find_fit(r, trial, self.pool.fitting_policy)
            if fit is not None:
                apply_fit(trial, fit, r.allocation_id)
                return _Reclaim(trial, victims)

    def _plan_on_one_agent(self, r: AllocationRequest) -> _Reclaim | None:
        """The cheapest room for `r` on a single agent: on each agent holding reclaimable work (the
        agents of the oldest first, at most _MAX_AGENTS_TRIED), its own takeable work released
        oldest first until `r` fits there."""
        best: _Reclaim | None = None
        tried = 0
        for agent_id, on_agent in self.on_agent.items():
            if tried >= _MAX_AGENTS_TRIED:
                break
            if agent_id not in self.capacity.agents:
                continue
            tried += 1
            trial, victims = self.capacity.copy(), []
            taken: Counter[str] = Counter()
            for candidate in on_agent:
                group = self._group_of_victim(candidate, r)
                if candidate.allocation_id in self.preempted or group is None:
                    continue
                if not self._takeable(candidate, group[0], group[1], taken):
                    continue
                trial.release(candidate.allocation_id)
                taken[group[1]] += candidate.slots_needed
                victims.append(candidate)
                fit = find_fit(r, _only(agent_id, trial), self.pool.fitting_policy)
                if fit is None:
                    continue
                apply_fit(trial, fit, r.allocation_id)
                plan = _Reclaim(trial, victims)
                if best is None or plan.cost < best.cost:
                    best = plan
                break
        return best

    def reclaim(self, r: AllocationRequest) -> bool:
        """Preempt work over its share until `r` fits, never taking a group below its share and
        always a whole allocation; reserve `r` there. The oldest placed go first, but never work
        that frees nothing `r` can use: when taking the oldest across the pool frees more than `r`
        needs (or finds no room), the victims come from one agent if that takes fewer (on 8 full
        agents of one-slot work, a four-slot request would otherwise take up to 25 slots, or use up
        what the borrowers may give back before any agent had room). A request of a shape and group
        that could not reclaim is not tried again while nothing changed."""
        memo = (shape_of(r), workspace_of(r), user_of(r))
        if self.no_reclaim.get(memo) == self.version:
            return False
        plan = self._plan_across_pool(r, self._victim_lists(r))
        if (plan is None or plan.slots > r.slots_needed) and r.slots_needed > 1:
            local = self._plan_on_one_agent(r)
            if local is not None and (plan is None or local.slots < plan.slots):
                plan = local
        if plan is None:
            self.no_reclaim[memo] = self.version
            return False
        self.capacity = plan.capacity
        self.version += 1
        for victim in plan.victims:
            self.held.add(victim, -victim.slots_needed)
            self.preempted.add(victim.allocation_id)
        self.held.add(r, r.slots_needed)
        ids = [v.allocation_id for v in plan.victims]
        self.outcome.preemptions.extend(Preemption(v, r.allocation_id) for v in ids)
        self.first_preemptor = self.first_preemptor or r.allocation_id
        self.outcome.waiting[r.allocation_id] = reasons.reclaiming(ids, self.pool.name)
        return True


def run_fair_share_pass(
    pool: ResourcePool,
    facts: PoolFacts,
    capacity: PoolCapacity,
    pending: Sequence[AllocationRequest],
    running: Sequence[AllocationRequest],
) -> PassOutcome:
    """Decide for the slotted `pending` requests of `pool` given its slotted `running` ones.
    `capacity` is the pass's own working copy."""
    shares = entitlements(pool, facts.usable_slots, [*running, *pending])
    state = _Pass(pool, facts, capacity, list(running), shares, _Held(running))
    state.enforce_maximums()
    holding = _Held(running)
    order = _Order(pool, pending)
    lenders: list[AllocationRequest] = []
    deprived: AllocationRequest | None = None
    while (r := order.take(state.held, shares)) is not None:
        quota = state.over_quota(r)
        if quota is not None:
            state.outcome.waiting[r.allocation_id] = quota
            continue
        if not state.within_share(r):
            lenders.append(r)
            continue
        if state.start(r) or state.reclaim(r):
            continue
        held, share = state.held.workspace[workspace_of(r)], shares.workspace.get(workspace_of(r), 0)
        state.outcome.waiting[r.allocation_id] = reasons.below_fair_share(
            state.workspace_name(r), held, share, state.why_not(r)
        )
        deprived = deprived or r
    for r in lenders:
        if deprived is not None:
            state.outcome.waiting[r.allocation_id] = reasons.held_for_fair_share(
                deprived, state.workspace_name(deprived)
            )
            continue
        quota = state.over_quota(r)
        if quota is not None:
            state.outcome.waiting[r.allocation_id] = quota
        elif not state.start(r):
            state.outcome.waiting[r.allocation_id] = state.why_not(r)
    for r, _ in state.outcome.started:
        holding.add(r, r.slots_needed)
    state.outcome.shares = division(pool, facts.usable_slots, [*running, *pending], shares, holding)
    return state.outcome
