"""One pass of Determined's priority scheduler over one pool and one kind of request (slotted or
zero-slot; the two never compete, so each gets its own pass).

Per priority level, highest first, every pending request is tried in queue order against a working
copy of the pool, and each fit is applied to the copy at once — also for a request that is then
held back, so it keeps its place and lower levels cannot take the slots it would use. A later
request of a level may start where an earlier one did not fit.

Whether the fitted requests of a level start (Determined's `prioritySchedulerWithFilter`):
- once this pass has chosen any preemption, nothing more starts: the freed slots belong to the
  request that asked for them;
- otherwise, while no higher level has had a request left unplaced, all of them start;
- after that ("backfilling"), a lower-priority request may jump ahead of blocked higher-priority
  work only when the pool has preemption enabled and the request is preemptible, so it can be
  taken back when the blocked work needs the room; with preemption disabled nothing of a lower
  level starts while a higher level waits.
With preemption enabled, each request of the level left unplaced then either fits in room already
freed by this pass's preemptions (it is reserved there and starts on a later pass) or tries to
preempt running lower-priority work (see `preemption.plan_preemption`). A request that preempts
does not start in this pass: it starts once the preempted work has released its slots.

A priority pool with quotas passes an `Admission` (quota_pass.py): a request its quota holds back
waits for that reason and holds back nothing else, and preemption never takes a group below its
guarantee.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from services.scheduler.domain import reasons
from services.scheduler.domain.capacity import PoolCapacity
from services.scheduler.domain.fitting import Fit, apply_fit, find_fit
from services.scheduler.domain.model import AllocationRequest, PoolShares, Preemption, ResourcePool
from services.scheduler.domain.ordering import QueueKey, by_priority_level, effective_priority, queue_key
from services.scheduler.domain.preemption import plan_preemption
from services.scheduler.domain.reasons import PoolFacts

if TYPE_CHECKING:
    from services.scheduler.domain.fair_queue import GroupTail

# A request's shape: what fitting looks at (its slots, whether it needs one agent, the agents it
# excludes), never which request it is.
Shape = tuple[int, bool, frozenset[str]]
# One priority level's pending requests: per shape, in queue order, each with its queue key.
Level = dict[Shape, list[tuple[QueueKey, AllocationRequest]]]


def shape_of(request: AllocationRequest) -> Shape:
    return (request.slots_needed, request.single_agent, request.excluded_agents)


def levels_of(pending: list[AllocationRequest], pool: ResourcePool) -> list[tuple[int, Level]]:
    """Pending requests as the pass takes them: levels highest priority first, each split by
    shape, every shape's list in queue order."""
    levels: dict[int, Level] = {}
    for request in sorted(pending, key=lambda r: queue_key(r, pool)):
        level = levels.setdefault(effective_priority(request, pool), {})
        level.setdefault(shape_of(request), []).append((queue_key(request, pool), request))
    return sorted(levels.items())


@dataclass(frozen=True)
class Tail:
    priority: int
    shape: Shape
    # In queue order: the rest of the level's requests of this shape.
    requests: list[tuple[QueueKey, AllocationRequest]]
    reason: str


@dataclass
class PassOutcome:
    started: list[tuple[AllocationRequest, Fit]] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    # allocation id -> why it waits.
    waiting: dict[str, str] = field(default_factory=dict)
    # Requests the pass did not look at one by one, all waiting for the same reason: the rest of a
    # level's shape once no shape of the level could fit (see run_priority_pass).
    tails: list[Tail] = field(default_factory=list)
    # A fair-share pass's division of the pool (fair_share.py); None for a priority pass.
    shares: PoolShares | None = None
    # A fair-share pass's requests not looked at one by one, by workspace, user and shape.
    group_tails: list[GroupTail] = field(default_factory=list)
    # How many requests a fair-share pass looked at one by one (what its cost follows).
    examined: int = 0

    def all_waiting(self) -> dict[str, str]:
        """Every waiting request with its reason, the tails spelled out."""
        waiting = dict(self.waiting)
        for tail in self.tails:
            waiting.update((request.allocation_id, tail.reason) for _, request in tail.requests)
        for group_tail in self.group_tails:
            waiting.update((request.allocation_id, group_tail.reason) for request in group_tail.members())
        return waiting


class Admission(Protocol):
    """What decides, besides fitting, whether a request may take slots in a pass (a priority
    pool's quotas, quota_pass.py)."""

    def holds_back(self, request: AllocationRequest) -> str | None:
        """Why `request` may not take slots now; None: it may."""

    def took(self, request: AllocationRequest) -> None:
        """`request` took its slots in the working state (placed, or reserved after preemption)."""

    def may_preempt(
        self, victim: AllocationRequest, for_request: AllocationRequest, chosen: Sequence[AllocationRequest]
    ) -> bool:
        """Whether `victim` may be preempted for `for_request`, besides `chosen`."""

    def preempted(self, victims: Sequence[str]) -> None:
        """`victims` are preempted: they give their slots back."""


@dataclass
class _Blocker:
    request: AllocationRequest
    priority: int


def run_priority_pass(
    pool: ResourcePool,
    facts: PoolFacts,
    capacity: PoolCapacity,
    pending: list[tuple[int, Level]],
    running: list[AllocationRequest],
    idle_pool: PoolCapacity | None = None,
    fits_idle_by_shape: dict[Shape, bool] | None = None,
    admission: Admission | None = None,
    preempted_before: Mapping[str, str] | None = None,
    preemptor_before: str | None = None,
) -> PassOutcome:
    """Decide for `pending` (levels_of's form) given `running` (both of this pool and this kind).
    `capacity` is the pass's own working copy, used as scratch; `idle_pool` the pool with nothing
    running (computed here when not given), and `fits_idle_by_shape` which shapes fit in it, as
    far as known (filled in here: a caller that keeps the pool keeps this too).

    Once every shape of a level has found no place in the unchanged working state, nothing more of
    that level can fit, so without preemption the pass stops looking at it: the rest of each shape
    waits for that shape's reason (`tails`). 10,000 requests waiting before a full pool cost a
    look at one of them, not 10,000. With preemption each waiting request may plan its own
    preemption, so every one is looked at, as with an `admission` (each request's quota is its own).

    `preempted_before` (victim -> the request it makes room for) and `preemptor_before` are what an
    earlier part of the pass preempted, already released from `capacity` (quota_pass.py)."""
    outcome = PassOutcome()
    idle: list[PoolCapacity | None] = [idle_pool]
    # Only preemption looks at running work by level (sorting 8,000 running requests is not free).
    running_by_level = by_priority_level(running, pool) if pool.preemption_enabled else {}
    preempted: dict[str, str] = dict(preempted_before or {})  # victim -> the request it makes room for
    first_preemptor: str | None = preemptor_before
    blocker: _Blocker | None = None
    may_stop_early = not pool.preemption_enabled and admission is None

    # Whether a request fits, and why not, depends on the working state and on the request's
    # shape alone, not on which request it is. So while the working state is unchanged (`version`
    # counts its changes), a shape that found no place finds none again.
    version = 0
    no_place: dict[Shape, int] = {}  # shape -> the version it found no place at
    why_not: dict[Shape, tuple[int, str]] = {}  # shape -> (version, reason)
    if fits_idle_by_shape is None:
        fits_idle_by_shape = {}

    def fit_now(request: AllocationRequest) -> Fit | None:
        if no_place.get(shape_of(request)) == version:
            return None
        fit = find_fit(request, capacity, pool.fitting_policy)
        if fit is None:
            no_place[shape_of(request)] = version
        return fit

    def fits_idle(request: AllocationRequest) -> bool:
        key = shape_of(request)
        if key not in fits_idle_by_shape:
            idle_now = idle[0]
            if idle_now is None:
                idle_now = idle[0] = capacity.emptied()
            fits_idle_by_shape[key] = find_fit(request, idle_now, pool.fitting_policy) is not None
        return fits_idle_by_shape[key]

    for priority, level in pending:
        fitted: list[tuple[AllocationRequest, Fit]] = []
        unplaced: list[AllocationRequest] = []
        # Unplaced requests that would fit were nothing running: only those can gain by preempting.
        fits_when_idle: set[str] = set()
        looked_at = dict.fromkeys(level, 0)  # shape -> how many of its requests were looked at
        stopped_early = False
        queue = level[next(iter(level))] if len(level) == 1 else heapq.merge(*level.values())
        for _, request in queue:
            if may_stop_early and all(no_place.get(s) == version for s in level):
                stopped_early = True
                break
            if admission is not None and (held_back := admission.holds_back(request)) is not None:
                outcome.waiting[request.allocation_id] = held_back
                continue
            looked_at[shape_of(request)] += 1
            fit = fit_now(request)
            if fit is None:
                unplaced.append(request)
                idle_fit = fits_idle(request)
                if idle_fit:
                    fits_when_idle.add(request.allocation_id)
                known = why_not.get(shape_of(request))
                if known is None or known[0] != version:
                    known = (version, reasons.cannot_fit(request, facts, capacity, idle_fit))
                    why_not[shape_of(request)] = known
                outcome.waiting[request.allocation_id] = known[1]
                continue
            apply_fit(capacity, fit, request.allocation_id)
            version += 1
            if admission is not None:
                admission.took(request)
            fitted.append((request, fit))
        first_of_tails: AllocationRequest | None = None
        if stopped_early:
            for s, requests in level.items():
                tail = requests[looked_at[s] :]
                if tail:
                    outcome.tails.append(Tail(priority, s, tail, why_not[s][1]))
                    if first_of_tails is None or tail[0][0] < queue_key(first_of_tails, pool):
                        first_of_tails = tail[0][1]

        for request, fit in fitted:
            if first_preemptor is not None:
                outcome.waiting[request.allocation_id] = reasons.held_for_preemption(first_preemptor)
            elif blocker is None or (pool.preemption_enabled and request.preemptible):
                outcome.started.append((request, fit))
            else:
                rule = reasons.ONLY_PREEMPTIBLE_BACKFILLS if pool.preemption_enabled else ""
                outcome.waiting[request.allocation_id] = reasons.behind_higher_priority(
                    blocker.request, blocker.priority, rule
                )

        if blocker is None:
            # The first request of the level left waiting, in queue order: looked-at ones come
            # before every tail.
            first_unplaced = unplaced[0] if unplaced else first_of_tails
            if first_unplaced is not None:
                blocker = _Blocker(first_unplaced, priority)

        if not pool.preemption_enabled:
            continue
        for request in unplaced:
            if admission is not None and (held_back := admission.holds_back(request)) is not None:
                # Its group took slots since it was looked at (a later request of the level).
                outcome.waiting[request.allocation_id] = held_back
                continue
            fit = fit_now(request)
            if fit is not None:
                apply_fit(capacity, fit, request.allocation_id)
                version += 1
                if admission is not None:
                    admission.took(request)
                outcome.waiting[request.allocation_id] = reasons.RESERVED_AFTER_PREEMPTION
                continue
            if request.allocation_id not in fits_when_idle:
                continue  # no preemption can make room that even an idle pool lacks
            may_take = (
                (lambda victim, chosen, r=request: admission.may_preempt(victim, r, chosen))
                if admission is not None
                else None
            )
            plan = plan_preemption(request, priority, pool, capacity, running_by_level, preempted, may_take)
            if plan is None:
                continue
            capacity = plan.capacity
            version += 1
            if admission is not None:
                admission.preempted(plan.victims)
                admission.took(request)
            for victim in plan.victims:
                preempted[victim] = request.allocation_id
                outcome.preemptions.append(Preemption(victim, request.allocation_id))
            first_preemptor = first_preemptor or request.allocation_id
            outcome.waiting[request.allocation_id] = reasons.preempting(plan.victims)
    return outcome
