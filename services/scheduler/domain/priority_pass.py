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
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.scheduler.domain import reasons
from services.scheduler.domain.capacity import PoolCapacity
from services.scheduler.domain.fitting import Fit, apply_fit, find_fit
from services.scheduler.domain.model import AllocationRequest, Preemption, ResourcePool
from services.scheduler.domain.ordering import by_priority_level
from services.scheduler.domain.preemption import plan_preemption
from services.scheduler.domain.reasons import PoolFacts


@dataclass
class PassOutcome:
    started: list[tuple[AllocationRequest, Fit]] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    # allocation id -> why it waits.
    waiting: dict[str, str] = field(default_factory=dict)


@dataclass
class _Blocker:
    request: AllocationRequest
    priority: int


def run_priority_pass(
    pool: ResourcePool,
    facts: PoolFacts,
    capacity: PoolCapacity,
    pending: list[AllocationRequest],
    running: list[AllocationRequest],
) -> PassOutcome:
    """Decide for `pending` given `running` (both of this pool and this kind). `capacity` is the
    pass's own working copy, used as scratch."""
    outcome = PassOutcome()
    idle_pool = capacity.emptied()
    running_by_level = by_priority_level(running, pool)
    preempted: dict[str, str] = {}  # victim -> the request it makes room for
    first_preemptor: str | None = None
    blocker: _Blocker | None = None

    # Whether a request fits, and why not, depends on the working state and on the request's
    # shape alone (its slots, whether it needs one agent), not on which request it is. So while the
    # working state is unchanged (`version` counts its changes), a shape that found no place finds
    # none again: 10,000 pending one-slot requests before a full pool cost one search, not 10,000.
    version = 0
    no_place: dict[tuple[int, bool], int] = {}  # shape -> the version it found no place at
    why_not: dict[tuple[int, bool], tuple[int, str]] = {}  # shape -> (version, reason)
    fits_idle_by_shape: dict[tuple[int, bool], bool] = {}

    def shape(request: AllocationRequest) -> tuple[int, bool]:
        return (request.slots_needed, request.single_agent)

    def fit_now(request: AllocationRequest) -> Fit | None:
        if no_place.get(shape(request)) == version:
            return None
        fit = find_fit(request, capacity, pool.fitting_policy)
        if fit is None:
            no_place[shape(request)] = version
        return fit

    def fits_idle(request: AllocationRequest) -> bool:
        key = shape(request)
        if key not in fits_idle_by_shape:
            fits_idle_by_shape[key] = find_fit(request, idle_pool, pool.fitting_policy) is not None
        return fits_idle_by_shape[key]

    for priority, level in by_priority_level(pending, pool).items():
        fitted: list[tuple[AllocationRequest, Fit]] = []
        unplaced: list[AllocationRequest] = []
        # Unplaced requests that would fit were nothing running: only those can gain by preempting.
        fits_when_idle: set[str] = set()
        for request in level:
            fit = fit_now(request)
            if fit is None:
                unplaced.append(request)
                idle_fit = fits_idle(request)
                if idle_fit:
                    fits_when_idle.add(request.allocation_id)
                known = why_not.get(shape(request))
                if known is None or known[0] != version:
                    known = (version, reasons.cannot_fit(request, facts, capacity, idle_fit))
                    why_not[shape(request)] = known
                outcome.waiting[request.allocation_id] = known[1]
                continue
            apply_fit(capacity, fit, request.allocation_id)
            version += 1
            fitted.append((request, fit))

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

        if unplaced and blocker is None:
            blocker = _Blocker(unplaced[0], priority)

        if not pool.preemption_enabled:
            continue
        for request in unplaced:
            fit = fit_now(request)
            if fit is not None:
                apply_fit(capacity, fit, request.allocation_id)
                version += 1
                outcome.waiting[request.allocation_id] = reasons.RESERVED_AFTER_PREEMPTION
                continue
            if request.allocation_id not in fits_when_idle:
                continue  # no preemption can make room that even an idle pool lacks
            plan = plan_preemption(request, priority, pool, capacity, running_by_level, preempted)
            if plan is None:
                continue
            capacity = plan.capacity
            version += 1
            for victim in plan.victims:
                preempted[victim] = request.allocation_id
                outcome.preemptions.append(Preemption(victim, request.allocation_id))
            first_preemptor = first_preemptor or request.allocation_id
            outcome.waiting[request.allocation_id] = reasons.preempting(plan.victims)
    return outcome
