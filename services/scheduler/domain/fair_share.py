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
   taking a group below its share and always a whole allocation (a gang is never split); the
   request is reserved in the room made and starts on a later pass, once they release. If nothing
   can be reclaimed it waits, and the pool keeps its free slots for it (no starvation).
2. Idle slots are lent: when no request within its share is left waiting, requests beyond their
   share start where they fit, in the same order. What they borrow is what step 1 reclaims.
3. A quota's maximum is never exceeded, lent slots included; its guarantee is part of the shares.
   A group over its maximum (an admin lowered it) gives back its youngest placements, preempted
   for no request in particular (Preemption.for_allocation_id is empty).

As in the priority pass, once a preemption is chosen nothing more starts in the pass: the slots
being freed belong to the request that asked for them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from services.scheduler.domain import reasons
from services.scheduler.domain.capacity import PoolCapacity
from services.scheduler.domain.fitting import apply_fit, find_fit
from services.scheduler.domain.model import AllocationRequest, Preemption, ResourcePool, ShareGroup
from services.scheduler.domain.ordering import QueueKey, effective_priority, queue_key
from services.scheduler.domain.priority_pass import PassOutcome, shape_of
from services.scheduler.domain.reasons import PoolFacts
from services.scheduler.domain.shares import Claim, divide, usage_adjusted

_NO_WORKSPACE = "-"


def workspace_of(request: AllocationRequest) -> str:
    return request.workspace or _NO_WORKSPACE


def user_of(request: AllocationRequest) -> str:
    return request.user or f"{workspace_of(request)}/-"


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


# Agents a four-slot request looks at for room on one agent: bounded, so that a pass over a pool
# of thousands of agents costs what a reclaim always did, not one fit per agent.
_MAX_AGENTS_TRIED = 64


@dataclass(frozen=True)
class _Reclaim:
    """A way to make room: the working state with the victims released and the request placed."""

    capacity: PoolCapacity
    held: _Held
    victims: list[AllocationRequest]

    @property
    def slots(self) -> int:
        return sum(v.slots_needed for v in self.victims)

    @property
    def cost(self) -> tuple[int, int]:
        return (self.slots, max((v.started_at_ns for v in self.victims), default=0))


def _only(agent_id: str) -> Callable[[PoolCapacity], PoolCapacity]:
    """A view of a working copy holding only one agent (a fit looked for in it is on that agent)."""

    def view(trial: PoolCapacity) -> PoolCapacity:
        return PoolCapacity({agent_id: trial.agents[agent_id]})

    return view


def _name(groups: dict[str, ShareGroup], key: str, kind: str) -> str:
    group = groups.get(key)
    return group.name if group is not None and group.name else f"{kind} '{key}'"


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
    fits_idle: dict[tuple[int, bool, frozenset[str]], bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workspaces = {g.key: g for g in self.pool.workspaces}
        self.users = {g.key: g for g in self.pool.users}

    def workspace_name(self, r: AllocationRequest) -> str:
        return _name(self.workspaces, workspace_of(r), "workspace")

    def over_quota(self, r: AllocationRequest) -> str | None:
        for groups, key, held, kind in (
            (self.workspaces, workspace_of(r), self.held.workspace, "workspace"),
            (self.users, user_of(r), self.held.user, "user"),
        ):
            group = groups.get(key)
            if group is not None and group.max_slots > 0 and held[key] + r.slots_needed > group.max_slots:
                return reasons.over_quota(
                    _name(groups, key, kind), held[key], group.max_slots, self.pool.name
                )
        return None

    def enforce_maximums(self) -> None:
        """A group holding more than its maximum (an admin lowered it) gives back its youngest
        placements until it holds no more: preempted gracefully, for no request in particular."""
        for groups, group_of in ((self.workspaces, workspace_of), (self.users, user_of)):
            over = {
                key: self.held_of(group_of, key) - group.max_slots
                for key, group in groups.items()
                if group.max_slots > 0 and self.held_of(group_of, key) > group.max_slots
            }
            if not over:
                continue
            youngest = sorted(self.running, key=lambda c: (-c.started_at_ns, c.allocation_id))
            for candidate in youngest:
                key = group_of(candidate)
                if (
                    over.get(key, 0) <= 0
                    or not candidate.preemptible
                    or candidate.allocation_id in self.preempted
                ):
                    continue
                self.preempted.add(candidate.allocation_id)
                self.outcome.preemptions.append(Preemption(candidate.allocation_id, ""))
                over[key] -= candidate.slots_needed

    def held_of(self, group_of: Callable[[AllocationRequest], str], key: str) -> int:
        return self.held.workspace[key] if group_of is workspace_of else self.held.user[key]

    def why_not(self, r: AllocationRequest) -> str:
        shape = shape_of(r)
        if shape not in self.fits_idle:
            idle = self.capacity.emptied()
            self.fits_idle[shape] = find_fit(r, idle, self.pool.fitting_policy) is not None
        return reasons.cannot_fit(r, self.facts, self.capacity, self.fits_idle[shape])

    def within_share(self, r: AllocationRequest) -> bool:
        ws, user = workspace_of(r), user_of(r)
        return self.held.workspace[ws] + r.slots_needed <= self.shares.workspace.get(
            ws, 0
        ) and self.held.user[user] + r.slots_needed <= self.shares.user.get(user, 0)

    def start(self, r: AllocationRequest) -> bool:
        """Start `r` where it fits now; whether it did."""
        fit = find_fit(r, self.capacity, self.pool.fitting_policy)
        if fit is None:
            return False
        apply_fit(self.capacity, fit, r.allocation_id)
        self.held.add(r, r.slots_needed)
        if self.first_preemptor is not None:
            self.outcome.waiting[r.allocation_id] = reasons.held_for_preemption(self.first_preemptor)
        else:
            self.outcome.started.append((r, fit))
        return True

    def _over_share(self, victim: AllocationRequest, r: AllocationRequest, held: _Held) -> bool:
        """Whether taking `victim` leaves its group at or above its share, at the level where it and
        `r` part: their workspaces, else their users; a user's own jobs are never reclaimed."""
        slots = victim.slots_needed
        if workspace_of(victim) != workspace_of(r):
            ws = workspace_of(victim)
            return held.workspace[ws] - slots >= self.shares.workspace.get(ws, 0)
        if user_of(victim) != user_of(r):
            user = user_of(victim)
            return held.user[user] - slots >= self.shares.user.get(user, 0)
        return False

    def _plan(
        self,
        r: AllocationRequest,
        candidates: Iterable[AllocationRequest],
        fits_in: Callable[[PoolCapacity], PoolCapacity] = lambda trial: trial,
    ) -> _Reclaim | None:
        """Release `candidates` over their share in order until `r` fits (looked for in
        `fits_in(trial)`, a view of the working copy); None if it never does."""
        trial, held, victims = self.capacity.copy(), self.held.copy(), []
        for candidate in candidates:
            if not self._over_share(candidate, r, held):
                continue
            trial.release(candidate.allocation_id)
            held.add(candidate, -candidate.slots_needed)
            victims.append(candidate)
            fit = find_fit(r, fits_in(trial), self.pool.fitting_policy)
            if fit is None:
                continue
            apply_fit(trial, fit, r.allocation_id)
            held.add(r, r.slots_needed)
            return _Reclaim(trial, held, victims)
        return None

    def _plan_on_one_agent(
        self, r: AllocationRequest, candidates: list[AllocationRequest]
    ) -> _Reclaim | None:
        """The cheapest room for `r` on a single agent: on each agent that holds candidates (the
        agents of the oldest first, at most _MAX_AGENTS_TRIED), its own candidates released oldest
        first until `r` fits there. The plan taking the fewest slots wins; between equals, the one
        whose youngest victim is oldest."""
        on_agent: dict[str, list[AllocationRequest]] = {}
        for c in candidates:
            for agent_id in dict.fromkeys(p.agent_id for p in c.placements):
                on_agent.setdefault(agent_id, []).append(c)
        best: _Reclaim | None = None
        for agent_id in list(on_agent)[:_MAX_AGENTS_TRIED]:
            if agent_id not in self.capacity.agents:
                continue
            plan = self._plan(r, on_agent[agent_id], _only(agent_id))
            if plan is not None and (best is None or plan.cost < best.cost):
                best = plan
        return best

    def reclaim(self, r: AllocationRequest) -> bool:
        """Preempt work over its share until `r` fits; reserve `r` there. The oldest placed go
        first, but never work that frees nothing `r` can use: when `r` fits on one agent, the
        victims come from one agent (taking the oldest across the pool until `r` fits would scatter
        them: on 8 full agents of one-slot work, a four-slot request could take up to 25 slots, or
        use up what the borrower may give back before any agent had room)."""
        candidates = sorted(
            (
                c
                for c in self.running
                if c.preemptible and c.allocation_id not in self.preempted and c.slots_needed > 0
            ),
            key=lambda c: (c.started_at_ns, c.allocation_id),
        )
        plan = self._plan(r, candidates)
        if plan is None or plan.slots > r.slots_needed:
            local = self._plan_on_one_agent(r, candidates)
            if local is not None and (plan is None or local.slots < plan.slots):
                plan = local
        if plan is None:
            return False
        victims = [v.allocation_id for v in plan.victims]
        self.capacity, self.held = plan.capacity, plan.held
        self.preempted.update(victims)
        self.outcome.preemptions.extend(Preemption(v, r.allocation_id) for v in victims)
        self.first_preemptor = self.first_preemptor or r.allocation_id
        self.outcome.waiting[r.allocation_id] = reasons.reclaiming(victims, self.pool.name)
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
    return state.outcome
