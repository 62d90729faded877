"""Short builders for scheduler states, so each test case reads as a table row."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from services.scheduler.domain.model import (
    Agent,
    AllocationRequest,
    ClusterState,
    Decision,
    FittingPolicy,
    Placement,
    ResourcePool,
    Slot,
)

DEFAULT_POOL = "default"


def pool(
    name: str = DEFAULT_POOL,
    *,
    policy: FittingPolicy = FittingPolicy.BEST,
    preemption: bool = False,
    default_priority: int = 0,
) -> ResourcePool:
    return ResourcePool(
        name=name, fitting_policy=policy, preemption_enabled=preemption, default_priority=default_priority
    )


def agent(
    agent_id: str,
    slots: int = 4,
    *,
    pool_name: str = DEFAULT_POOL,
    enabled: bool = True,
    draining: bool = False,
    disabled_slots: Iterable[str] = (),
    used: Mapping[str, str] | None = None,
    slot_ids: Sequence[str] | None = None,
) -> Agent:
    """An agent with slots "0".."slots-1" (or `slot_ids`); `used` maps slot id -> allocation id."""
    ids = list(slot_ids) if slot_ids is not None else [str(i) for i in range(slots)]
    off = set(disabled_slots)
    holders = dict(used or {})
    return Agent(
        id=agent_id,
        resource_pool=pool_name,
        enabled=enabled,
        draining=draining,
        slots=tuple(Slot(id=s, enabled=s not in off, allocation_id=holders.get(s, "")) for s in ids),
    )


def pending(
    allocation_id: str,
    slots: int = 1,
    *,
    pool_name: str = DEFAULT_POOL,
    priority: int = 0,
    submitted: int = 0,
    requested: int = 0,
    job: str = "",
    preemptible: bool = False,
    single_agent: bool = False,
) -> AllocationRequest:
    return AllocationRequest(
        allocation_id=allocation_id,
        resource_pool=pool_name,
        slots_needed=slots,
        priority=priority,
        job_submitted_at_ns=submitted,
        requested_at_ns=requested,
        job_id=job,
        preemptible=preemptible,
        single_agent=single_agent,
    )


def running(
    allocation_id: str,
    on: Mapping[str, Sequence[str]],
    *,
    slots: int | None = None,
    pool_name: str = DEFAULT_POOL,
    priority: int = 0,
    submitted: int = 0,
    requested: int = 0,
    job: str = "",
    preemptible: bool = True,
) -> AllocationRequest:
    """A placed request; `on` maps agent id -> its slot ids there."""
    placements = tuple(Placement(agent_id, tuple(ids)) for agent_id, ids in on.items())
    return AllocationRequest(
        allocation_id=allocation_id,
        resource_pool=pool_name,
        slots_needed=slots if slots is not None else sum(len(p.slot_ids) for p in placements),
        priority=priority,
        job_submitted_at_ns=submitted,
        requested_at_ns=requested,
        job_id=job,
        preemptible=preemptible,
        placements=placements,
    )


def cluster(
    agents: Sequence[Agent],
    requests: Sequence[AllocationRequest],
    pools: Sequence[ResourcePool] = (),
    *,
    mark_slots: bool = True,
) -> ClusterState:
    """A state with the given pools (the default pool when none). With `mark_slots`, every slot a
    running request is placed on also carries its allocation id, as the master sends it."""
    owners = {(p.agent_id, s): r.allocation_id for r in requests for p in r.placements for s in p.slot_ids}
    if mark_slots:
        agents = [
            Agent(
                id=a.id,
                resource_pool=a.resource_pool,
                enabled=a.enabled,
                draining=a.draining,
                slots=tuple(
                    replace(s, allocation_id=s.allocation_id or owners.get((a.id, s.id), "")) for s in a.slots
                ),
            )
            for a in agents
        ]
    return ClusterState(pools=tuple(pools) or (pool(),), agents=tuple(agents), requests=tuple(requests))


def started(decision: Decision) -> dict[str, dict[str, tuple[str, ...]]]:
    """allocation id -> {agent id: slot ids} for everything that starts."""
    return {a.allocation_id: {p.agent_id: p.slot_ids for p in a.placements} for a in decision.assignments}


def started_ids(decision: Decision) -> list[str]:
    return [a.allocation_id for a in decision.assignments]


def preempted(decision: Decision) -> dict[str, str]:
    """victim -> the request it makes room for."""
    return {p.allocation_id: p.for_allocation_id for p in decision.preemptions}


def waiting(decision: Decision) -> dict[str, tuple[str, int]]:
    """allocation id -> (reason, queue position)."""
    return {w.allocation_id: (w.reason, w.queue_position) for w in decision.waiting}
