"""`schedule(state) -> Decision`: the scheduler's whole job, as a pure function.

Each resource pool is decided on its own, with its own fitting policy, preemption switch and
default priority; within a pool, slotted and zero-slot requests get separate passes (Determined:
a waiting 8-GPU trial must not hold back a TensorBoard, nor the other way round). A pool's slotted
requests are decided by its scheduler type: fair share (fair_share.py), or priority, with its
workspaces' and users' quotas where any are set (quota_pass.py). The output depends
only on the content of the state, not on the order of its lists.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.scheduler.domain import reasons
from services.scheduler.domain.capacity import build_pool_capacity
from services.scheduler.domain.fair_queue import FairQueue
from services.scheduler.domain.fair_share import run_fair_share_pass
from services.scheduler.domain.model import (
    Agent,
    AllocationRequest,
    Assignment,
    ClusterState,
    Decision,
    PoolShares,
    Preemption,
    ResourcePool,
    SchedulerType,
    Waiting,
)
from services.scheduler.domain.ordering import queue_key
from services.scheduler.domain.priority_pass import PassOutcome, levels_of, run_priority_pass
from services.scheduler.domain.quota_pass import run_priority_quota_pass
from services.scheduler.domain.quotas import Quotas
from services.scheduler.domain.reasons import PoolFacts
from services.scheduler.domain.validation import validate_state


def schedule(state: ClusterState) -> Decision:
    """Which pending requests start where, which running ones to preempt, and why the rest wait.

    Raises InvalidScheduleInput when the state contradicts itself.
    """
    validate_state(state)
    pools = {pool.name: pool for pool in state.pools}
    requests_by_pool: dict[str, list[AllocationRequest]] = {}
    for request in state.requests:
        requests_by_pool.setdefault(request.resource_pool, []).append(request)
    agents_by_pool: dict[str, list[Agent]] = {}
    for agent in state.agents:
        agents_by_pool.setdefault(agent.resource_pool, []).append(agent)

    assignments: list[Assignment] = []
    preemptions: list[Preemption] = []
    waiting: list[Waiting] = []
    shares: list[PoolShares] = []
    for pool_name in sorted(requests_by_pool):
        pool = pools.get(pool_name)
        requests = requests_by_pool[pool_name]
        if pool is None:
            waiting.extend(_waiting_in_missing_pool(pool_name, requests))
            continue
        outcome = _schedule_pool(pool, agents_by_pool.get(pool_name, []), requests, state.requests)
        assignments.extend(Assignment(r.allocation_id, fit.placements) for r, fit in outcome.started)
        preemptions.extend(outcome.preemptions)
        waiting.extend(_queue(pool, requests, outcome.waiting))
        if outcome.shares is not None:
            shares.append(outcome.shares)
    return Decision(tuple(assignments), tuple(preemptions), tuple(waiting), tuple(shares))


def _schedule_pool(
    pool: ResourcePool,
    agents: Sequence[Agent],
    requests: Sequence[AllocationRequest],
    all_requests: Sequence[AllocationRequest],
) -> PassOutcome:
    # Running work anywhere occupies its slots, even work of another pool on an agent that has
    # since moved to this one.
    base = build_pool_capacity(agents, all_requests)
    facts = PoolFacts.of(pool.name, agents)
    combined = PassOutcome()
    for zero_slot in (False, True):
        kind = [r for r in requests if (r.slots_needed == 0) == zero_slot]
        if pool.scheduler_type is SchedulerType.FAIR_SHARE and not zero_slot:
            # Zero-slot work holds no slots to share: it keeps the priority pass.
            outcome = run_fair_share_pass(pool, facts, base.copy(), FairQueue(pool, kind))
        elif not zero_slot and Quotas.set_in(pool):
            # Quotas count slots: zero-slot work keeps the plain pass.
            outcome = run_priority_quota_pass(
                pool,
                facts,
                base.copy(),
                pending=[r for r in kind if not r.running],
                running=[r for r in kind if r.running],
            )
        else:
            outcome = run_priority_pass(
                pool,
                facts,
                base.copy(),
                pending=levels_of([r for r in kind if not r.running], pool),
                running=[r for r in kind if r.running],
            )
        combined.started.extend(outcome.started)
        combined.preemptions.extend(outcome.preemptions)
        combined.waiting.update(outcome.all_waiting())
        combined.shares = combined.shares or outcome.shares
    return combined


def _queue(pool: ResourcePool, requests: Sequence[AllocationRequest], why: dict[str, str]) -> list[Waiting]:
    """Waiting entries in queue order; a position counts only the requests still waiting ahead
    of it in the same pool (what starts now has left the queue)."""
    still_waiting = sorted((r for r in requests if r.allocation_id in why), key=lambda r: queue_key(r, pool))
    return [
        Waiting(r.allocation_id, why[r.allocation_id], position) for position, r in enumerate(still_waiting)
    ]


def _waiting_in_missing_pool(pool_name: str, requests: Sequence[AllocationRequest]) -> list[Waiting]:
    # No pool, so no pool default: a request without a priority gets Determined's default.
    pending = sorted(
        (r for r in requests if not r.running),
        key=lambda r: queue_key(r, ResourcePool(name=pool_name)),
    )
    reason = reasons.pool_missing(pool_name)
    return [Waiting(r.allocation_id, reason, position) for position, r in enumerate(pending)]
