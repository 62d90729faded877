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

What a pass costs: the requests it takes are filed by workspace, user, job and shape (fair_queue.py),
and it looks at them one by one only while that can change something. Whether a request starts,
reclaims, waits within its share, is lent to, or is held by a quota depends on its workspace, user
and shape alone and on the working state (what runs where, what each group holds), not on which
request it is. So once every request a user has left would change nothing (none fits, none can
reclaim, the rest are lent to or over a quota), the pass would take that user's requests one after
the other, all of them, with nothing changing: it gives them their reasons by workspace, user and
shape (`GroupTail`) instead. The same holds for the lent requests of step 2. 10,000 requests waiting
before a full pool cost a look at a few of them per user, not 10,000; a pass that reclaims costs
its reclaims. `stop_early=False` looks at every request one by one: the definition the early stop
must agree with (tests/unit/scheduler/test_scheduler_fair_share_pass.py).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field

from services.scheduler.domain import reasons
from services.scheduler.domain.capacity import PoolCapacity
from services.scheduler.domain.fair_queue import (
    Candidates,
    Entitlements,
    FairQueue,
    GroupTail,
    Place,
    UserQueue,
)
from services.scheduler.domain.fitting import apply_fit, find_fit
from services.scheduler.domain.model import AllocationRequest, Preemption, ResourcePool
from services.scheduler.domain.ordering import QueueKey
from services.scheduler.domain.pass_fits import fits_when_idle, start_where_it_fits
from services.scheduler.domain.priority_pass import PassOutcome, Shape, shape_of
from services.scheduler.domain.quotas import Quotas, group_name, user_of, workspace_of
from services.scheduler.domain.reasons import PoolFacts


class _Tally:
    """Counts during a pass: the queue's (only read) and what the pass changed."""

    __slots__ = ("_base", "_frozen", "changes")

    def __init__(self, base: Mapping[str, int], changes: dict[str, int] | None = None) -> None:
        self._base = base
        self.changes: dict[str, int] = {} if changes is None else changes
        self._frozen: _Tally | None = None

    def __getitem__(self, key: str) -> int:
        return self._base.get(key, 0) + self.changes.get(key, 0)

    def add(self, key: str, slots: int) -> None:
        self.changes[key] = self.changes.get(key, 0) + slots
        self._frozen = None

    def frozen(self) -> _Tally:
        """The counts as they are now, kept when these change (one copy per change at most)."""
        if self._frozen is None:
            self._frozen = _Tally(self._base, dict(self.changes))
        return self._frozen


class _Held:
    """Slots held by each workspace, user and job during the pass."""

    def __init__(self, queue: FairQueue) -> None:
        self.workspace = _Tally(queue.held_workspace)
        self.user = _Tally(queue.held_user)
        self.job = _Tally(queue.held_job)

    def add(self, r: AllocationRequest, slots: int) -> None:
        self.workspace.add(workspace_of(r), slots)
        self.user.add(user_of(r), slots)
        self.job.add(r.job_key, slots)


def _part(held: int, share: int) -> float:
    """How much of its share a group holds: smaller goes first; no share at all goes last."""
    return held / share if share > 0 else float("inf")


def _stand_in(queue: UserQueue, pool: ResourcePool, place: Place) -> AllocationRequest:
    """A request of `place`: where a request fits, what it may reclaim and why it waits depend on
    its workspace, user and shape alone (the fit found differs by id, whether one exists does not).
    Kept with the user's queue."""
    ws, user, shape = place
    stand_in = queue.stand_ins.get(shape)
    if stand_in is None:
        slots, single_agent, excluded = shape
        stand_in = queue.stand_ins[shape] = AllocationRequest(
            allocation_id="",
            resource_pool=pool.name,
            slots_needed=slots,
            single_agent=single_agent,
            excluded_agents=excluded,
            workspace=ws,
            user=user,
        )
    return stand_in


@dataclass(frozen=True)
class _Verdict:
    """What step 1 makes of a user's requests of one shape while nothing changes."""

    shape: Shape
    # Its reason when over a quota.
    quota: str | None
    within_share: bool


@dataclass(frozen=True)
class _Block:
    """The lent requests of a user left when the pass stopped taking that user's requests one by
    one (step 1): step 2 takes them in the order step 1 would have, the jobs ordered by the part
    of their shares they held then."""

    ws: str
    user: str
    shapes: tuple[Shape, ...]
    job_held: _Tally


class _Order:
    """The pending requests of a FairQueue as the pass takes them (module docstring, step 1):
    cursors into the queue's buckets, which are only read."""

    def __init__(self, queue: FairQueue) -> None:
        self._queue = queue
        # (ws, user, job, shape) -> how many of the bucket's front were taken.
        self._cursor: dict[tuple[str, str, str, Shape], int] = {}
        self._taken_ws: Counter[str] = Counter()
        self._taken_user: Counter[tuple[str, str]] = Counter()
        # (ws, user) -> shape -> how many are left (copied from the queue once touched).
        self._left: dict[tuple[str, str], dict[Shape, int]] = {}
        # place -> the requests taken one by one.
        self.examined: dict[Place, list[str]] = {}
        self.examined_count = 0
        # The workspaces and (once looked at) their users in the order taken, at a version.
        self._ranked: tuple[int, list[str], dict[str, list[str]]] | None = None

    def user_queue(self, ws: str, user: str) -> UserQueue:
        return self._queue.tree[ws][user]

    def left(self, ws: str, user: str) -> dict[Shape, int]:
        left = self._left.get((ws, user))
        if left is None:
            left = self._left[(ws, user)] = dict(self._queue.tree[ws][user].shapes)
        return left

    def next_user(self, held: _Held, shares: Entitlements, version: int) -> tuple[str, str] | None:
        """The workspace holding the smallest part of its share (ties by key) with requests left,
        and in it the user. The order is made once per version of the working state."""
        if self._ranked is None or self._ranked[0] != version:
            ranked = sorted(
                (_part(held.workspace[ws], shares.workspace.get(ws, 0)), ws) for ws in self._queue.tree
            )
            self._ranked = (version, [ws for _, ws in ranked], {})
        _, workspaces, users_of = self._ranked
        for ws in workspaces:
            if self._queue.pending_by_workspace[ws] > self._taken_ws[ws]:
                break
        else:
            return None
        users = users_of.get(ws)
        if users is None:
            queues = self._queue.tree[ws]
            users = users_of[ws] = [
                u for _, u in sorted((_part(held.user[u], shares.user.get(u, 0)), u) for u in queues)
            ]
        for user in users:
            if self._queue.tree[ws][user].count > self._taken_user[(ws, user)]:
                return ws, user
        raise AssertionError(f"workspace {ws!r} has requests left but none of its users has")

    def _heads(
        self, ws: str, user: str, shapes: Collection[Shape] | None, part: _JobPart
    ) -> Iterator[tuple[tuple[int, float, QueueKey], str, Shape]]:
        """The front of each of the user's buckets (of `shapes`; None: all), keyed by the order
        jobs are taken in: priority, the part of its share the job holds, queue order."""
        for job, buckets in self._queue.tree[ws][user].jobs.items():
            job_part = part(job)
            for shape, bucket in buckets.items():
                if shapes is not None and shape not in shapes:
                    continue
                at = self._cursor.get((ws, user, job, shape), 0)
                if at < len(bucket):
                    key = bucket[at][0]
                    yield (key[0], job_part, key), job, shape

    def _advance(self, ws: str, user: str, job: str, shape: Shape) -> AllocationRequest:
        at = self._cursor.get((ws, user, job, shape), 0)
        self._cursor[(ws, user, job, shape)] = at + 1
        request = self._queue.tree[ws][user].jobs[job][shape][at][1]
        self._taken_ws[ws] += 1
        self._taken_user[(ws, user)] += 1
        self.left(ws, user)[shape] -= 1
        self.examined.setdefault((ws, user, shape), []).append(request.allocation_id)
        self.examined_count += 1
        return request

    def take(self, ws: str, user: str, part: _JobPart) -> AllocationRequest:
        """The user's next request: its jobs by priority, the part of their shares they hold, and
        queue order."""
        _, job, shape = min(self._heads(ws, user, None, part))
        return self._advance(ws, user, job, shape)

    def first(self, ws: str, user: str, shapes: Collection[Shape], part: _JobPart) -> AllocationRequest:
        """The request of `shapes` that `take` would give first (none is taken)."""
        _, job, shape = min(self._heads(ws, user, shapes, part))
        queue = self._queue.tree[ws][user]
        return queue.jobs[job][shape][self._cursor.get((ws, user, job, shape), 0)][1]

    def set_aside(self, ws: str, user: str) -> None:
        """The user's requests are no longer taken one by one (their reasons are known, or they
        wait for step 2): step 1 goes on with the others."""
        taken = self._queue.tree[ws][user].count - self._taken_user[(ws, user)]
        self._taken_ws[ws] += taken
        self._taken_user[(ws, user)] += taken

    def merged(
        self, ws: str, user: str, shapes: Collection[Shape], part: _JobPart
    ) -> Iterator[AllocationRequest]:
        """The user's requests of `shapes` left, in the order `take` gives them with the jobs'
        parts fixed (nothing of theirs changes while they wait)."""
        heap = list(self._heads(ws, user, shapes, part))
        heapq.heapify(heap)
        while heap:
            _, job, shape = heap[0]
            request = self._advance(ws, user, job, shape)
            bucket = self._queue.tree[ws][user].jobs[job][shape]
            at = self._cursor[(ws, user, job, shape)]
            if at < len(bucket):
                key = bucket[at][0]
                heapq.heapreplace(heap, ((key[0], heap[0][0][1], key), job, shape))
            else:
                heapq.heappop(heap)
            yield request


class _JobPart:
    """The part of its share each job holds, with the holdings of one moment."""

    def __init__(self, held: _Tally, shares: Entitlements) -> None:
        self._held = held
        self._shares = shares

    def __call__(self, job: str) -> float:
        return _part(self._held[job], self._shares.job.get(job, 0))


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
    queue: FairQueue
    shares: Entitlements
    # The pool with nothing running (made when first needed), and whether each request shape
    # would fit in it (for waiting reasons); a session keeps both between passes.
    idle: PoolCapacity | None = None
    fits_idle: dict[Shape, bool] = field(default_factory=dict)
    outcome: PassOutcome = field(default_factory=PassOutcome)
    preempted: set[str] = field(default_factory=set)
    first_preemptor: str | None = None
    # The working state's changes so far: what was found possible or impossible at a version
    # stays so until the next (a start or a reclaim changes it).
    version: int = 0
    no_place: dict[Shape, int] = field(default_factory=dict)
    has_place: dict[Shape, int] = field(default_factory=dict)
    no_reclaim: dict[tuple[Shape, str, str], int] = field(default_factory=dict)
    has_reclaim: dict[tuple[Shape, str, str], int] = field(default_factory=dict)
    reasons_by_shape: dict[Shape, tuple[int, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.held = _Held(self.queue)
        self.job_part = _JobPart(self.held.job, self.shares)
        self.workspaces = {g.key: g for g in self.pool.workspaces}
        self.users = {g.key: g for g in self.pool.users}
        self.quotas = Quotas(self.pool)
        # How much of each victim list's front is passed for good.
        self.fronts: dict[tuple[str, str], int] = Counter()
        # The agents holding reclaimable work, those of the oldest first (made when first needed).
        self._agents_by_age: list[str] | None = None

    def protected(self, c: AllocationRequest) -> bool:
        """Placed after the pool's `protect_started_after`: not reclaimed yet (a minimum run before
        reclaim). Victim lists are oldest first, so what is protected is the young end of each."""
        protect = self.pool.protect_started_after_ns
        return bool(protect) and c.started_at_ns > protect

    def stand_in(self, order: _Order, place: Place) -> AllocationRequest:
        return _stand_in(order.user_queue(place[0], place[1]), self.pool, place)

    def workspace_name(self, ws: str) -> str:
        return group_name(self.workspaces, ws, "workspace")

    def over_quota(self, ws: str, user: str, slots: int) -> str | None:
        return self.quotas.over_maximum_of(ws, user, slots, self.held)

    def enforce_maximums(self) -> None:
        """A group holding more than its maximum (an admin lowered it) gives back its youngest
        placements until it holds no more: preempted gracefully, for no request in particular."""

        def placements_of(kind: str, keys: Collection[str]) -> Iterator[AllocationRequest]:
            lists = self.queue.by_workspace if kind == "workspace" else self.queue.by_user
            return (c for key in keys for _, _, c in lists.get(key, ()))

        for victim in self.quotas.over_maximums(self.held, self.preempted, placements_of):
            self.outcome.preemptions.append(Preemption(victim.allocation_id, ""))

    def why_not(self, r: AllocationRequest) -> str:
        shape = shape_of(r)
        known = self.reasons_by_shape.get(shape)
        if known is not None and known[0] == self.version:
            return known[1]
        reason = reasons.cannot_fit(r, self.facts, self.capacity, fits_when_idle(self, r))
        self.reasons_by_shape[shape] = (self.version, reason)
        return reason

    def within_share(self, ws: str, user: str, slots: int) -> bool:
        return self.held.workspace[ws] + slots <= self.shares.workspace.get(ws, 0) and self.held.user[
            user
        ] + slots <= self.shares.user.get(user, 0)

    def below_share(self, r: AllocationRequest) -> str:
        ws = workspace_of(r)
        held, share = self.held.workspace[ws], self.shares.workspace.get(ws, 0)
        return reasons.below_fair_share(self.workspace_name(ws), held, share, self.why_not(r))

    def may_fit(self, r: AllocationRequest, look: bool) -> bool | None:
        """Whether a request of r's shape fits now, as far as known at this version (None: not
        known, and not `look`ed for)."""
        shape = shape_of(r)
        if self.no_place.get(shape) == self.version:
            return False
        if self.has_place.get(shape) == self.version:
            return True
        if not look:
            return None
        if find_fit(r, self.capacity, self.pool.fitting_policy) is None:
            self.no_place[shape] = self.version
            return False
        self.has_place[shape] = self.version
        return True

    def start(self, r: AllocationRequest) -> bool:
        """Start `r` where it fits now; whether it did (pass_fits.py)."""
        return start_where_it_fits(self, r)

    # -- reclaiming ----------------------------------------------------------------------------

    def _lists(self, level: str) -> dict[str, Candidates]:
        return self.queue.by_workspace if level == "workspace" else self.queue.by_user

    def _victim_lists(self, r: AllocationRequest) -> list[tuple[str, str]]:
        """Where `r` may reclaim from: the other workspaces' work, and the other users' of its own
        workspace (a user's own jobs are never reclaimed for it). No allocation is in two of them."""
        ws, user = workspace_of(r), user_of(r)
        lists = [("workspace", key) for key in self.queue.by_workspace if key != ws]
        lists += [("user", key) for key in self.queue.by_user if key != user and key.rsplit("/", 1)[0] == ws]
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
        this attempt (its holding only falls in this pass), is passed for good; protected work
        ends the list."""
        queue = self._lists(level)[key]
        at = max(at, self.fronts[(level, key)])
        while at < len(queue):
            candidate = queue[at][2]
            if self.protected(candidate):
                return len(queue)
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
                queue = self._lists(level)[key]
                if positions[where] >= len(queue):
                    continue
                head = queue[positions[where]][2]
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

    def _agents_oldest_first(self) -> list[str]:
        """The agents holding reclaimable work, ordered by their oldest such work (an allocation on
        several agents puts them in the order of its placements)."""
        if self._agents_by_age is None:
            keyed = []
            for agent_id, candidates in self.queue.on_agent.items():
                _, _, head = candidates[0]
                if self.protected(head):
                    continue
                hosts = list(dict.fromkeys(p.agent_id for p in head.placements))
                keyed.append((head.started_at_ns, head.allocation_id, hosts.index(agent_id), agent_id))
            self._agents_by_age = [agent_id for *_, agent_id in sorted(keyed)]
        return self._agents_by_age

    def _plan_on_one_agent(self, r: AllocationRequest) -> _Reclaim | None:
        """The cheapest room for `r` on a single agent: on each agent holding reclaimable work (the
        agents of the oldest first, at most _MAX_AGENTS_TRIED), its own takeable work released
        oldest first until `r` fits there."""
        best: _Reclaim | None = None
        tried = 0
        for agent_id in self._agents_oldest_first():
            if tried >= _MAX_AGENTS_TRIED:
                break
            if agent_id not in self.capacity.agents:
                continue
            tried += 1
            trial, victims = self.capacity.copy(), []
            taken: Counter[str] = Counter()
            for _, _, candidate in self.queue.on_agent[agent_id]:
                if self.protected(candidate):
                    break
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

    def _plan(self, r: AllocationRequest) -> _Reclaim | None:
        plan = self._plan_across_pool(r, self._victim_lists(r))
        if (plan is None or plan.slots > r.slots_needed) and r.slots_needed > 1:
            local = self._plan_on_one_agent(r)
            if local is not None and (plan is None or local.slots < plan.slots):
                plan = local
        return plan

    def may_reclaim(self, r: AllocationRequest, look: bool) -> bool | None:
        """Whether a request of r's workspace, user and shape could reclaim now, as far as known at
        this version (None: not known, and not `look`ed for). Looking plans without preempting;
        the victim lists' fronts it passes stay passed (module docstring of `_next_victim`)."""
        memo = (shape_of(r), workspace_of(r), user_of(r))
        if self.no_reclaim.get(memo) == self.version:
            return False
        if self.has_reclaim.get(memo) == self.version:
            return True
        if not look:
            return None
        if self._plan(r) is None:
            self.no_reclaim[memo] = self.version
            return False
        self.has_reclaim[memo] = self.version
        return True

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
        plan = self._plan(r)
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

    # -- taking requests by the group ----------------------------------------------------------

    def settle(self, order: _Order, ws: str, user: str, look: bool) -> list[_Verdict] | None:
        """What step 1 taking the user's requests left would make of each shape, if that changes
        nothing: over a quota, beyond its share (lent to in step 2), or within its share where
        none of its shape fits and its workspace, user and shape can reclaim nothing. None when
        some may start or reclaim. Only the fits and reclaims already known at this version
        count, unless `look` (the last request taken changed nothing either: looking is cheaper
        than taking the rest one by one)."""
        verdicts = []
        for shape, count in order.left(ws, user).items():
            if count <= 0:
                continue
            quota = self.over_quota(ws, user, shape[0])
            within = quota is None and self.within_share(ws, user, shape[0])
            if within:
                stand_in = self.stand_in(order, (ws, user, shape))
                if self.may_fit(stand_in, look) is not False or self.may_reclaim(stand_in, look) is not False:
                    return None
            verdicts.append(_Verdict(shape, quota, within))
        return verdicts

    def tail(self, order: _Order, place: Place, reason: str) -> None:
        ws, user, _ = place
        excluded = frozenset(order.examined.get(place, ()))
        self.outcome.group_tails.append(GroupTail(place, order.user_queue(ws, user), excluded, reason))

    def set_aside(
        self,
        order: _Order,
        ws: str,
        user: str,
        verdicts: list[_Verdict],
        lenders: list[AllocationRequest | _Block],
        deprived: AllocationRequest | None,
    ) -> AllocationRequest | None:
        """Give the user's requests left what step 1 would, taking them one by one with nothing
        changing (`settle`): a quota's reason, a place in step 2 (in the order taken), or the
        reason of a request within its share that cannot start (the first of those is the
        deprived one, for whom step 2 keeps the free slots). Returns the deprived request."""
        lent: list[Shape] = []
        within: list[Shape] = []
        for verdict in verdicts:
            place = (ws, user, verdict.shape)
            if verdict.quota is not None:
                self.tail(order, place, verdict.quota)
            elif verdict.within_share:
                self.tail(order, place, self.below_share(self.stand_in(order, place)))
                within.append(verdict.shape)
            else:
                lent.append(verdict.shape)
        if deprived is None and within:
            deprived = order.first(ws, user, within, self.job_part)
        if lent:
            lenders.append(_Block(ws, user, tuple(lent), self.held.job.frozen()))
        order.set_aside(ws, user)
        return deprived

    def lend_block(self, order: _Order, block: _Block, stop_early: bool) -> None:
        """Step 2 for a block of lent requests (no request within its share waits): each starts
        where it fits, unless over a quota. Once none of the shapes left fits and the rest are over
        a quota, the rest wait with their shape's reason."""
        ws, user = block.ws, block.user
        left = order.left(ws, user)
        members: Iterator[AllocationRequest] | None = None
        look = True
        while True:
            shapes = [shape for shape in block.shapes if left[shape] > 0]
            if not shapes:
                return
            settled = self._lent_reasons(order, ws, user, shapes, look) if stop_early else None
            if settled is not None:
                for shape, reason in zip(shapes, settled, strict=True):
                    self.tail(order, (ws, user, shape), reason)
                return
            if members is None:
                members = order.merged(ws, user, block.shapes, _JobPart(block.job_held, self.shares))
            version = self.version
            self.lend(next(members))
            look = self.version == version

    def _lent_reasons(
        self, order: _Order, ws: str, user: str, shapes: list[Shape], look: bool
    ) -> list[str] | None:
        """Why each shape's lent requests wait, if none can start now (None when some may)."""
        why = []
        for shape in shapes:
            quota = self.over_quota(ws, user, shape[0])
            if quota is not None:
                why.append(quota)
                continue
            stand_in = self.stand_in(order, (ws, user, shape))
            if self.may_fit(stand_in, look) is not False:
                return None
            why.append(self.why_not(stand_in))
        return why

    def lend(self, r: AllocationRequest) -> None:
        quota = self.over_quota(workspace_of(r), user_of(r), r.slots_needed)
        if quota is not None:
            self.outcome.waiting[r.allocation_id] = quota
        elif not self.start(r):
            self.outcome.waiting[r.allocation_id] = self.why_not(r)


def run_fair_share_pass(
    pool: ResourcePool,
    facts: PoolFacts,
    capacity: PoolCapacity,
    queue: FairQueue,
    idle: PoolCapacity | None = None,
    fits_idle: dict[Shape, bool] | None = None,
    stop_early: bool = True,
) -> PassOutcome:
    """Decide for the slotted pending requests of `pool` given its slotted running ones, both in
    `queue` (only read). `capacity` is the pass's own working copy; `idle` the pool with nothing
    running and `fits_idle` which shapes fit in it, as far as known (filled in here: a caller that
    keeps the pool keeps these too)."""
    shares = queue.entitlements(pool, facts.usable_slots)
    state = _Pass(pool, facts, capacity, queue, shares, idle, {} if fits_idle is None else fits_idle)
    state.enforce_maximums()
    order = _Order(queue)
    lenders: list[AllocationRequest | _Block] = []
    deprived: AllocationRequest | None = None
    look = False
    while (at := order.next_user(state.held, shares, state.version)) is not None:
        ws, user = at
        verdicts = state.settle(order, ws, user, look) if stop_early else None
        if verdicts is not None:
            deprived = state.set_aside(order, ws, user, verdicts, lenders, deprived)
            continue
        r = order.take(ws, user, state.job_part)
        version = state.version
        quota = state.over_quota(ws, user, r.slots_needed)
        if quota is not None:
            state.outcome.waiting[r.allocation_id] = quota
        elif not state.within_share(ws, user, r.slots_needed):
            lenders.append(r)
        elif not (state.start(r) or state.reclaim(r)):
            state.outcome.waiting[r.allocation_id] = state.below_share(r)
            deprived = deprived or r
        look = state.version == version
    kept = None
    if deprived is not None:
        kept = reasons.held_for_fair_share(deprived, state.workspace_name(workspace_of(deprived)))
    for item in lenders:
        if kept is not None:
            if isinstance(item, _Block):
                for shape in item.shapes:
                    if order.left(item.ws, item.user)[shape] > 0:
                        state.tail(order, (item.ws, item.user, shape), kept)
            else:
                state.outcome.waiting[item.allocation_id] = kept
        elif isinstance(item, _Block):
            state.lend_block(order, item, stop_early)
        else:
            state.lend(item)
    holding = _Held(queue)
    for r, _ in state.outcome.started:
        holding.add(r, r.slots_needed)
    state.outcome.shares = queue.division(pool, facts.usable_slots, shares, (holding.workspace, holding.user))
    state.outcome.examined = order.examined_count
    return state.outcome
