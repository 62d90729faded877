"""Generated fair-share pools big enough for a pass to stop looking at requests one by one: several
workspaces, users and jobs, requests of several shapes and priorities, quotas and guarantees,
running work to reclaim (hypothesis); and the changes a master sends between passes, as a random
walk that follows each decision (what starts runs, what is preempted ends) with arrivals,
departures and new settings in between."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import strategies as st

from services.scheduler.domain.model import (
    Agent,
    AllocationRequest,
    ClusterState,
    Decision,
    FittingPolicy,
    Placement,
    ResourcePool,
    SchedulerType,
    ShareGroup,
    Slot,
)

POOL = "p"
# (workspace, user) of a request; ("", "") is work of no workspace.
OWNERS = [("w1", "w1/a"), ("w1", "w1/b"), ("w2", "w2/a"), ("w3", "w3/a"), ("w3", "w3/b"), ("", "")]
WORKSPACE_KEYS = ["w1", "w2", "w3", "-"]
USER_KEYS = ["w1/a", "w1/b", "w2/a", "w3/a", "w3/b"]
SIZES = [1, 1, 1, 2, 3, 4, 8]
PRIORITIES = [0, 10, 42, 60]


def _group(draw: st.DrawFn, key: str) -> ShareGroup:
    return ShareGroup(
        key=key,
        weight=draw(st.sampled_from([1.0, 0.5, 2.0, 3.0])),
        recent_slot_seconds=draw(st.sampled_from([0.0, 0.0, 100.0, 5000.0])),
        guaranteed_slots=draw(st.sampled_from([0, 0, 2, 6])),
        max_slots=draw(st.sampled_from([0, 0, 0, 3, 8, 16])),
        name=draw(st.sampled_from(["", f"group {key}"])),
    )


def fair_pool(draw: st.DrawFn) -> ResourcePool:
    workspaces = draw(st.lists(st.sampled_from(WORKSPACE_KEYS), unique=True, max_size=4))
    users = draw(st.lists(st.sampled_from(USER_KEYS), unique=True, max_size=4))
    return ResourcePool(
        name=POOL,
        fitting_policy=draw(st.sampled_from(list(FittingPolicy))),
        default_priority=draw(st.sampled_from([0, 42, 50])),
        scheduler_type=SchedulerType.FAIR_SHARE,
        workspaces=tuple(_group(draw, key) for key in sorted(workspaces)),
        users=tuple(_group(draw, key) for key in sorted(users)),
        protect_started_after_ns=draw(st.sampled_from([0, 0, 10, 20])),
    )


def pending_request(rng: random.Random, allocation_id: str, agent_ids: list[str]) -> AllocationRequest:
    ws, user = rng.choice(OWNERS)
    job = rng.randrange(3)
    excluded = frozenset(rng.sample(agent_ids, 1)) if agent_ids and rng.random() < 0.1 else frozenset()
    return AllocationRequest(
        allocation_id=allocation_id,
        resource_pool=POOL,
        slots_needed=rng.choice(SIZES),
        priority=rng.choice(PRIORITIES),
        job_submitted_at_ns=rng.randrange(6),
        requested_at_ns=rng.randrange(50),
        # A job belongs to one user, and carries one weight.
        job_id=f"{user or 'none'}-j{job}",
        preemptible=rng.random() < 0.85,
        single_agent=rng.random() < 0.3,
        excluded_agents=excluded,
        workspace=ws,
        user=user,
        weight=[1.0, 0.5, 3.0][job],
    )


@st.composite
def fair_clusters(draw: st.DrawFn, max_pending: int = 50) -> ClusterState:
    """One fair-share pool: agents, running work on some of their slots, pending requests."""
    pool = fair_pool(draw)
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    agents = []
    for i in range(draw(st.integers(1, 6))):
        slots = rng.choice([1, 2, 4, 8, 8])
        agents.append(
            Agent(
                id=f"a{i}",
                resource_pool=POOL,
                enabled=rng.random() < 0.95,
                draining=rng.random() < 0.05,
                slots=tuple(Slot(str(s), enabled=rng.random() < 0.95) for s in range(slots)),
            )
        )
    requests: list[AllocationRequest] = []
    busy = draw(st.floats(0.0, 1.0))
    for agent in agents:
        free = [s.id for s in agent.slots]
        while free and rng.random() < busy:
            size = min(len(free), rng.choice([1, 1, 2, 4]))
            taken, free = free[:size], free[size:]
            placed = pending_request(rng, f"r{len(requests)}", [])
            requests.append(
                replace(
                    placed,
                    slots_needed=size,
                    single_agent=False,
                    placements=(Placement(agent.id, tuple(taken)),),
                    started_at_ns=rng.randrange(30),
                )
            )
    agent_ids = [a.id for a in agents]
    for k in range(draw(st.integers(0, max_pending))):
        requests.append(pending_request(rng, f"q{k}", agent_ids))
    return ClusterState(pools=(pool,), agents=tuple(agents), requests=tuple(requests))


def next_state(state: ClusterState, decision: Decision, rng: random.Random, step: int) -> ClusterState:
    """What the master would hold after `decision` and a few of a cluster's events: started work
    runs, preempted work ends (its trial asks again under a new allocation), and at random some
    running work ends, some pending work is killed, new work arrives, and the pool's settings
    change (recent usage, weights, quotas, the minimum run before reclaim)."""
    requests = {r.allocation_id: r for r in state.requests}
    now = 100 + step
    for assignment in decision.assignments:
        requests[assignment.allocation_id] = replace(
            requests[assignment.allocation_id], placements=assignment.placements, started_at_ns=now
        )
    for preemption in decision.preemptions:
        if rng.random() < 0.8:  # some are still releasing at the next pass
            ended = requests.pop(preemption.allocation_id)
            requests[f"{ended.allocation_id}+"] = replace(
                ended, allocation_id=f"{ended.allocation_id}+", placements=(), started_at_ns=0
            )
    running = sorted(r for r, request in requests.items() if request.running)
    for request_id in rng.sample(running, min(len(running), rng.randrange(3))):
        del requests[request_id]
    waiting = sorted(r for r, request in requests.items() if not request.running)
    for request_id in rng.sample(waiting, min(len(waiting), rng.randrange(2))):
        del requests[request_id]
    agent_ids = [a.id for a in state.agents]
    for k in range(rng.randrange(4)):
        arrival = pending_request(rng, f"n{step}-{k}", agent_ids)
        requests[arrival.allocation_id] = arrival
    pool = state.pools[0]
    if rng.random() < 0.5:
        workspaces = tuple(
            replace(g, recent_slot_seconds=g.recent_slot_seconds * 0.9 + rng.choice([0.0, 50.0]))
            for g in pool.workspaces
        )
        pool = replace(pool, workspaces=workspaces, protect_started_after_ns=rng.choice([0, now - 5]))
    if rng.random() < 0.15 and pool.users:
        changed = rng.choice(pool.users)
        users = tuple(
            replace(g, max_slots=rng.choice([0, 2, 6]), weight=rng.choice([1.0, 2.0])) if g == changed else g
            for g in pool.users
        )
        pool = replace(pool, users=users)
    return ClusterState(pools=(pool,), agents=state.agents, requests=tuple(requests.values()))
