"""Making room for a request by preempting running lower-priority work (Determined's
`trySchedulingTaskViaPreemption`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from services.scheduler.domain.capacity import PoolCapacity
from services.scheduler.domain.fitting import apply_fit, find_fit
from services.scheduler.domain.model import AllocationRequest, ResourcePool
from services.scheduler.domain.ordering import queue_key


@dataclass(frozen=True)
class PreemptionPlan:
    # The working state with the victims removed and the request's fit applied.
    capacity: PoolCapacity
    victims: tuple[str, ...]


def plan_preemption(
    request: AllocationRequest,
    priority: int,
    pool: ResourcePool,
    capacity: PoolCapacity,
    running_by_level: dict[int, list[AllocationRequest]],
    already_preempted: Collection[str],
    may_take: Callable[[AllocationRequest, Sequence[AllocationRequest]], bool] | None = None,
) -> PreemptionPlan | None:
    """Remove candidates from a copy of `capacity` until `request` fits; None if it never does.

    Candidates are running preemptible requests of strictly lower priority (larger number), taken
    from the lowest priority and the back of its queue first, so the most recently queued work of
    the least important level goes first. At the request's own priority only work of another job
    queued strictly behind it is a candidate: Determined compares job queue positions there, so a
    job never preempts itself. Nothing already chosen in this pass is chosen twice. Work the master
    is already preempting from an earlier pass still looks running here (the scheduler keeps no
    state), so it may be named again; the master treats a repeated preemption as the same one.
    `may_take(candidate, chosen so far)` may refuse a candidate besides (a pool's quotas: no group
    is taken below its guarantee, quotas.py).
    """
    trial = capacity.copy()
    victims: list[AllocationRequest] = []
    request_key = queue_key(request, pool)
    for level in sorted((p for p in running_by_level if p >= priority), reverse=True):
        for candidate in reversed(running_by_level[level]):
            if level == priority and (
                queue_key(candidate, pool) <= request_key or candidate.job_key == request.job_key
            ):
                continue
            if not candidate.preemptible or candidate.allocation_id in already_preempted:
                continue
            if may_take is not None and not may_take(candidate, victims):
                continue
            trial.release(candidate.allocation_id)
            victims.append(candidate)
            fit = find_fit(request, trial, pool.fitting_policy)
            if fit is not None:
                apply_fit(trial, fit, request.allocation_id)
                return PreemptionPlan(trial, tuple(v.allocation_id for v in victims))
    return None
