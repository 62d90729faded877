"""Properties of every decision, over generated clusters (hypothesis)."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.scheduler.domain.capacity import build_pool_capacity
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
from services.scheduler.domain.ordering import effective_priority
from services.scheduler.domain.schedule import schedule

POOL_NAMES = ["p0", "p1"]
PRIORITIES = [0, 1, 10, 42, 60]
WORKSPACES = ["w1", "w2", "w3"]
USERS = ["w1/u1", "w1/u2", "w2/u1", "w3/u3"]


def share_groups(keys: list[str]) -> st.SearchStrategy[ShareGroup]:
    return st.builds(
        ShareGroup,
        key=st.sampled_from(keys),
        weight=st.sampled_from([1.0, 2.0, 0.5]),
        recent_slot_seconds=st.sampled_from([0.0, 10.0, 5000.0]),
        guaranteed_slots=st.integers(0, 4),
        max_slots=st.integers(0, 5),
    )


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    pools = tuple(
        ResourcePool(
            name=name,
            fitting_policy=draw(st.sampled_from(list(FittingPolicy))),
            preemption_enabled=draw(st.booleans()),
            default_priority=draw(st.sampled_from([0, 5, 42, 70])),
            scheduler_type=draw(st.sampled_from(list(SchedulerType))),
            workspaces=tuple(draw(st.lists(share_groups(WORKSPACES), max_size=3, unique_by=lambda g: g.key))),
            users=tuple(draw(st.lists(share_groups(USERS), max_size=3, unique_by=lambda g: g.key))),
            protect_started_after_ns=draw(st.sampled_from([0, 1, 2])),
        )
        for name in POOL_NAMES[: draw(st.integers(1, len(POOL_NAMES)))]
    )
    agents: list[Agent] = []
    free: list[tuple[str, str]] = []  # (agent, slot) not yet given to a running request
    for i in range(draw(st.integers(0, 5))):
        slot_count = draw(st.integers(0, 6))
        slots = []
        for s in range(slot_count):
            ghost = draw(st.booleans()) and draw(st.integers(0, 9)) == 0
            slots.append(
                Slot(str(s), enabled=draw(st.integers(0, 5)) > 0, allocation_id="ghost" if ghost else "")
            )
            if not ghost:
                free.append((f"a{i}", str(s)))
        agents.append(
            Agent(
                id=f"a{i}",
                resource_pool=draw(st.sampled_from(POOL_NAMES)),
                enabled=draw(st.integers(0, 5)) > 0,
                draining=draw(st.integers(0, 5)) == 0,
                slots=tuple(slots),
            )
        )
    requests: list[AllocationRequest] = []

    def request(
        allocation_id: str,
        slots_needed: int,
        placements: tuple[Placement, ...] = (),
        single_agent: bool = False,
    ) -> AllocationRequest:
        return AllocationRequest(
            allocation_id=allocation_id,
            resource_pool=draw(st.sampled_from([*POOL_NAMES, "missing"])),
            slots_needed=slots_needed,
            priority=draw(st.sampled_from(PRIORITIES)),
            job_submitted_at_ns=draw(st.integers(0, 3)),
            requested_at_ns=draw(st.integers(0, 3)),
            job_id=draw(st.sampled_from(["", "j1", "j2", "j3"])),
            preemptible=draw(st.booleans()),
            single_agent=single_agent,
            placements=placements,
            workspace=(owner := draw(st.sampled_from(USERS))).split("/")[0],
            user=owner,
            weight=draw(st.sampled_from([1.0, 0.5, 3.0])),
            started_at_ns=draw(st.integers(0, 3)) if placements else 0,
        )

    for r in range(draw(st.integers(0, 5))):
        if agents and draw(st.integers(0, 4)) == 0:
            host = draw(st.sampled_from(agents)).id
            requests.append(request(f"r{r}", 0, (Placement(host, ()),)))
            continue
        if not free:
            continue
        taken = draw(st.lists(st.sampled_from(free), min_size=1, max_size=4, unique=True))
        free = [f for f in free if f not in taken]
        by_agent: dict[str, list[str]] = {}
        for agent_id, slot_id in taken:
            by_agent.setdefault(agent_id, []).append(slot_id)
        requests.append(
            request(f"r{r}", len(taken), tuple(Placement(a, tuple(s)) for a, s in by_agent.items()))
        )
    for p in range(draw(st.integers(0, 8))):
        requests.append(request(f"q{p}", draw(st.integers(0, 9)), single_agent=draw(st.booleans())))
    mark = draw(st.booleans())
    if mark:  # as the master sends it: slots carry the allocation placed on them
        owners = {
            (p.agent_id, s): r.allocation_id for r in requests for p in r.placements for s in p.slot_ids
        }
        agents = [
            Agent(
                a.id,
                a.resource_pool,
                a.enabled,
                a.draining,
                tuple(
                    Slot(s.id, s.enabled, s.allocation_id or owners.get((a.id, s.id), "")) for s in a.slots
                ),
            )
            for a in agents
        ]
    return ClusterState(pools=pools, agents=tuple(agents), requests=tuple(requests))


def _used_slots(state: ClusterState) -> set[tuple[str, str]]:
    used = {(a.id, s.id) for a in state.agents for s in a.slots if s.allocation_id}
    used |= {(p.agent_id, s) for r in state.requests for p in r.placements for s in p.slot_ids}
    return used


PROPERTY_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(clusters())
def test_no_slot_is_given_twice_or_given_while_in_use(state: ClusterState) -> None:
    decision = schedule(state)
    given_out = [(p.agent_id, s) for a in decision.assignments for p in a.placements for s in p.slot_ids]
    assert len(given_out) == len(set(given_out))
    assert not set(given_out) & _used_slots(state)


@PROPERTY_SETTINGS
@given(clusters())
def test_assignments_use_only_enabled_slots_of_agents_that_take_work_in_the_right_pool(
    state: ClusterState,
) -> None:
    decision = schedule(state)
    agents = {a.id: a for a in state.agents}
    requests = {r.allocation_id: r for r in state.requests}
    per_agent: Counter[str] = Counter()
    for assignment in decision.assignments:
        request = requests[assignment.allocation_id]
        for placement in assignment.placements:
            host = agents[placement.agent_id]
            assert host.enabled and not host.draining
            assert host.resource_pool == request.resource_pool
            enabled = {s.id for s in host.slots if s.enabled}
            assert set(placement.slot_ids) <= enabled
            per_agent[host.id] += len(placement.slot_ids)
    used = _used_slots(state)
    for agent_id, count in per_agent.items():
        capacity = sum(1 for s in agents[agent_id].slots if s.enabled and (agent_id, s.id) not in used)
        assert count <= capacity


@PROPERTY_SETTINGS
@given(clusters())
def test_a_started_request_gets_exactly_the_slots_it_needs(state: ClusterState) -> None:
    decision = schedule(state)
    requests = {r.allocation_id: r for r in state.requests}
    for assignment in decision.assignments:
        request = requests[assignment.allocation_id]
        assert not request.running
        assert sum(len(p.slot_ids) for p in assignment.placements) == request.slots_needed
        if request.slots_needed == 0 or request.single_agent:
            assert len(assignment.placements) == 1
        # A multi-agent fit takes the same number of slots on every agent.
        assert len({len(p.slot_ids) for p in assignment.placements}) == 1


@PROPERTY_SETTINGS
@given(clusters())
def test_every_pending_request_is_answered_once_with_dense_queue_positions(state: ClusterState) -> None:
    decision = schedule(state)
    pending = sorted(r.allocation_id for r in state.requests if not r.running)
    answered = [a.allocation_id for a in decision.assignments] + [w.allocation_id for w in decision.waiting]
    assert sorted(answered) == pending
    pool_of = {r.allocation_id: r.resource_pool for r in state.requests}
    positions: dict[str, list[int]] = {}
    for w in decision.waiting:
        assert w.reason
        positions.setdefault(pool_of[w.allocation_id], []).append(w.queue_position)
    for listed in positions.values():
        assert listed == list(range(len(listed)))


@PROPERTY_SETTINGS
@given(clusters())
def test_preemptions_take_only_preemptible_lower_or_equal_priority_work_of_the_same_pool(
    state: ClusterState,
) -> None:
    decision = schedule(state)
    requests = {r.allocation_id: r for r in state.requests}
    pools = {p.name: p for p in state.pools}
    started = {a.allocation_id for a in decision.assignments}
    victims = [p.allocation_id for p in decision.preemptions]
    assert len(victims) == len(set(victims))
    why = {w.allocation_id: w.reason for w in decision.waiting}
    for preemption in decision.preemptions:
        victim = requests[preemption.allocation_id]
        if not preemption.for_allocation_id:
            # A group gives back what it holds over its quota's maximum (quotas.py), in any pool.
            pool = pools[victim.resource_pool]
            assert victim.running and victim.preemptible and victim.slots_needed > 0
            maxima = {g.key: g.max_slots for g in (*pool.workspaces, *pool.users) if g.max_slots}
            assert victim.workspace in maxima or victim.user in maxima
            continue
        beneficiary = requests[preemption.for_allocation_id]
        pool = pools[beneficiary.resource_pool]
        assert victim.running and victim.preemptible
        assert victim.resource_pool == beneficiary.resource_pool
        assert not beneficiary.running and beneficiary.allocation_id not in started
        reclaims_guarantee = "guaranteed to" in why[beneficiary.allocation_id]
        if (pool.scheduler_type is SchedulerType.FAIR_SHARE and beneficiary.slots_needed > 0) or (
            reclaims_guarantee
        ):
            # Fair share, and a priority pool's guarantee, reclaim from another workspace, or from
            # another user of its own, and not what was placed after the pool's protection time.
            assert victim.slots_needed > 0 and victim.user != beneficiary.user
            protect = pool.protect_started_after_ns
            assert not protect or victim.started_at_ns <= protect
            if reclaims_guarantee:
                guaranteed = {g.key for g in (*pool.workspaces, *pool.users) if g.guaranteed_slots}
                assert beneficiary.workspace in guaranteed or beneficiary.user in guaranteed
            continue
        assert pool.preemption_enabled
        assert effective_priority(victim, pool) >= effective_priority(beneficiary, pool)
        if effective_priority(victim, pool) == effective_priority(beneficiary, pool):
            assert victim.job_key != beneficiary.job_key


def _holdings(requests: list[AllocationRequest]) -> Counter[str]:
    """Slots by workspace and by user key."""
    held: Counter[str] = Counter()
    for r in requests:
        held[r.workspace] += r.slots_needed
        held[r.user] += r.slots_needed
    return held


@PROPERTY_SETTINGS
@given(clusters())
def test_no_start_takes_a_workspace_or_user_past_its_maximum(state: ClusterState) -> None:
    decision = schedule(state)
    started = {a.allocation_id for a in decision.assignments}
    for pool in state.pools:
        mine = [r for r in state.requests if r.resource_pool == pool.name]
        before = _holdings([r for r in mine if r.running])
        now = _holdings([r for r in mine if r.running or r.allocation_id in started])
        for group in (*pool.workspaces, *pool.users):
            if group.max_slots and now[group.key] > before[group.key]:
                assert now[group.key] <= group.max_slots


@PROPERTY_SETTINGS
@given(clusters())
def test_no_preemption_takes_a_group_below_its_guarantee_in_a_priority_pool(state: ClusterState) -> None:
    """What a group keeps (its running work, less everything preempted from it) plus what the
    preemptions make room for in it is never below its guarantee, unless it held less already (a
    maximum's give-backs aside: an admin's lowered maximum takes work back whatever it was)."""
    decision = schedule(state)
    requests = {r.allocation_id: r for r in state.requests}
    for pool in state.pools:
        if pool.scheduler_type is not SchedulerType.PRIORITY:
            continue
        mine = [r for r in state.requests if r.resource_pool == pool.name and r.slots_needed > 0]
        ours = [p for p in decision.preemptions if requests[p.allocation_id].resource_pool == pool.name]
        given_back = {p.allocation_id for p in ours if not p.for_allocation_id}
        taken = {p.allocation_id for p in ours if p.for_allocation_id}
        before = _holdings([r for r in mine if r.running and r.allocation_id not in given_back])
        after = _holdings([r for r in mine if r.running and r.allocation_id not in given_back | taken])
        after += _holdings([requests[i] for i in {p.for_allocation_id for p in ours if p.for_allocation_id}])
        for group in (*pool.workspaces, *pool.users):
            assert after[group.key] >= min(group.guaranteed_slots, before[group.key])


@PROPERTY_SETTINGS
@given(clusters(), st.integers(0, 2**32 - 1))
def test_the_decision_depends_only_on_the_content_of_the_state(state: ClusterState, seed: int) -> None:
    first: Decision = schedule(state)
    assert schedule(state) == first
    shuffler = random.Random(seed)
    agents = [
        Agent(a.id, a.resource_pool, a.enabled, a.draining, tuple(shuffler.sample(a.slots, len(a.slots))))
        for a in state.agents
    ]
    shuffled = ClusterState(
        pools=tuple(shuffler.sample(state.pools, len(state.pools))),
        agents=tuple(shuffler.sample(agents, len(agents))),
        requests=tuple(shuffler.sample(state.requests, len(state.requests))),
    )
    assert schedule(shuffled) == first


@PROPERTY_SETTINGS
@given(clusters(), st.integers(0, 2**32 - 1))
def test_working_state_counts_stay_true_through_takes_and_releases(state: ClusterState, seed: int) -> None:
    capacity = build_pool_capacity(state.agents, state.requests)
    chooser = random.Random(seed)
    holders = sorted({r.allocation_id for r in state.requests if r.running})
    for step in range(20):
        agent = capacity.agents.get(chooser.choice([a.id for a in state.agents])) if state.agents else None
        if agent is not None and agent.free_slots() and chooser.random() < 0.6:
            taken = agent.free_slots()[: chooser.randint(1, agent.num_free)]
            capacity.take(agent.agent_id, taken, f"new{step}")
            holders.append(f"new{step}")
        elif holders:
            capacity.release(holders.pop(chooser.randrange(len(holders))))
        for each in capacity:
            assert each.num_free == len(each.free_slots())
            assert each.has_no_slot_in_use == all(h is None for h in each.occupant.values())
