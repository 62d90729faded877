"""Quotas in a priority pool (services/scheduler/domain/quota_pass.py, quotas.py) as a decision
function: a workspace's or user's maximum is never passed and its waiting reason names the quota;
work within a guarantee goes first whatever its priority and reclaims slots from groups over their
own guarantee, the least important first, whole allocations only, never work younger than the
pool's minimum run; and, over simulated time with the decisions applied, a guarantee is reached
within a bounded number of passes."""

from __future__ import annotations

from dataclasses import replace

from services.scheduler.domain.model import (
    Agent,
    AllocationRequest,
    ClusterState,
    Decision,
    Placement,
    ResourcePool,
    ShareGroup,
    Slot,
)
from services.scheduler.domain.schedule import schedule
from services.scheduler.domain.session import SchedulingSession
from tests.unit.scheduler.scheduler_builders import preempted, started_ids, waiting

VISION = ShareGroup("A", name="workspace 'vision'")
SPEECH = ShareGroup("B", name="workspace 'speech'")


def _pool(*workspaces: ShareGroup, users: tuple[ShareGroup, ...] = (), **extra: object) -> ResourcePool:
    return ResourcePool(name="p", workspaces=workspaces, users=users, **extra)  # type: ignore[arg-type]


def _agents(count: int, slots: int) -> tuple[Agent, ...]:
    return tuple(
        Agent(id=f"a{i}", resource_pool="p", slots=tuple(Slot(str(s)) for s in range(slots)))
        for i in range(count)
    )


def _request(
    rid: str,
    ws: str,
    *,
    slots: int = 1,
    user: str = "",
    priority: int = 42,
    submitted: int = 0,
    on: tuple[tuple[str, tuple[str, ...]], ...] = (),
    started_at: int = 0,
    preemptible: bool = True,
) -> AllocationRequest:
    return AllocationRequest(
        allocation_id=rid,
        resource_pool="p",
        slots_needed=slots,
        priority=priority,
        job_submitted_at_ns=submitted,
        job_id=f"job-{rid}",
        preemptible=preemptible,
        workspace=ws,
        user=user or f"{ws}/u",
        placements=tuple(Placement(agent, ids) for agent, ids in on),
        started_at_ns=started_at,
    )


def _state(pool: ResourcePool, agents: tuple[Agent, ...], *requests: AllocationRequest) -> ClusterState:
    owners = {(p.agent_id, s): r.allocation_id for r in requests for p in r.placements for s in p.slot_ids}
    marked = tuple(
        replace(a, slots=tuple(replace(s, allocation_id=owners.get((a.id, s.id), "")) for s in a.slots))
        for a in agents
    )
    return ClusterState(pools=(pool,), agents=marked, requests=requests)


def _decide(state: ClusterState) -> Decision:
    """schedule's decision, which a session holding the same state gives too."""
    decision = schedule(state)
    answer = SchedulingSession(state).decide()
    assert (answer.assignments, answer.preemptions) == (decision.assignments, decision.preemptions)
    assert {w.allocation_id: w.reason for w in answer.waiting} == {
        w.allocation_id: w.reason for w in decision.waiting
    }
    return decision


# ---- the maximum -------------------------------------------------------------------------------


def test_a_workspace_maximum_is_never_passed_and_the_reason_names_the_quota() -> None:
    pool = _pool(replace(VISION, max_slots=2))
    requests = [_request(f"v{i}", "A", submitted=i) for i in range(4)]
    decision = _decide(_state(pool, _agents(1, 4), *requests))
    assert started_ids(decision) == ["v0", "v1"]
    reason = "workspace 'vision' holds 2 slots of its maximum of 2 in pool 'p'; starts when its own work ends"
    assert waiting(decision) == {"v2": (reason, 0), "v3": (reason, 1)}


def test_work_held_back_by_its_quota_holds_back_no_other_work() -> None:
    # Vision's first request waits for its quota; Speech's lower-priority work starts in the idle
    # slots (the priority pass would otherwise keep them for the higher-priority blocked request).
    pool = _pool(replace(VISION, max_slots=1))
    decision = _decide(
        _state(
            pool,
            _agents(1, 2),
            _request("held", "A", priority=1, on=(("a0", ("0",)),)),
            _request("v", "A", priority=1),
            _request("s", "B", priority=60),
        )
    )
    assert started_ids(decision) == ["s"]
    assert "workspace 'vision' holds 1 slot of its maximum of 1" in waiting(decision)["v"][0]


def test_a_user_maximum_holds_within_a_workspace_without_one() -> None:
    alice = ShareGroup("A/alice", max_slots=1, name="user 'alice' in workspace 'vision'")
    pool = _pool(users=(alice,))
    decision = _decide(
        _state(
            pool,
            _agents(1, 4),
            _request("a1", "A", user="A/alice"),
            _request("a2", "A", user="A/alice", submitted=1),
            _request("b1", "A", user="A/bob", submitted=2),
        )
    )
    assert started_ids(decision) == ["a1", "b1"]
    assert waiting(decision)["a2"][0].startswith("user 'alice' in workspace 'vision' holds 1 slot")


def test_a_lowered_maximum_gives_back_the_youngest_placements() -> None:
    pool = _pool(replace(VISION, max_slots=1))
    decision = _decide(
        _state(
            pool,
            _agents(1, 4),
            _request("old", "A", on=(("a0", ("0",)),), started_at=1),
            _request("young", "A", on=(("a0", ("1",)),), started_at=5),
            _request("mid", "A", on=(("a0", ("2",)),), started_at=3),
        )
    )
    assert preempted(decision) == {"young": "", "mid": ""}


# ---- the guarantee ------------------------------------------------------------------------------


def test_work_within_a_guarantee_goes_first_whatever_its_priority() -> None:
    pool = _pool(replace(VISION, guaranteed_slots=1))
    decision = _decide(
        _state(
            pool,
            _agents(1, 1),
            _request("urgent", "B", priority=1),
            _request("guaranteed", "A", priority=90, submitted=5),
        )
    )
    assert started_ids(decision) == ["guaranteed"]


def test_a_guarantee_is_reclaimed_from_work_over_its_guarantee_even_without_priority_preemption() -> None:
    # Speech fills the pool with more important work; Vision is guaranteed two slots. The least
    # important of Speech's work goes first, the oldest among equals; the pool's priority
    # preemption is off, which a guarantee does not need.
    pool = _pool(replace(VISION, guaranteed_slots=2), SPEECH)
    running = [
        _request("s-new", "B", priority=10, on=(("a0", ("0",)),), started_at=9),
        _request("s-old", "B", priority=10, on=(("a0", ("1",)),), started_at=2),
        _request("s-mid", "B", priority=10, on=(("a0", ("2",)),), started_at=5),
        _request("s-vip", "B", priority=1, on=(("a0", ("3",)),), started_at=1),
    ]
    decision = _decide(
        _state(
            pool, _agents(1, 4), *running, _request("v1", "A", priority=80), _request("v2", "A", priority=80)
        )
    )
    assert preempted(decision) == {"s-old": "v1", "s-mid": "v2"}
    reason = waiting(decision)["v1"][0]
    assert reason.startswith("reclaiming the slots guaranteed to workspace 'vision' in pool 'p'")
    assert started_ids(decision) == []


def test_a_reclaim_never_takes_a_group_below_its_own_guarantee() -> None:
    # Speech holds two slots, both guaranteed; a third workspace's two are not: only those go.
    pool = _pool(replace(VISION, guaranteed_slots=2), replace(SPEECH, guaranteed_slots=2))
    running = [
        _request("s1", "B", priority=90, on=(("a0", ("0",)),), started_at=1),
        _request("s2", "B", priority=90, on=(("a0", ("1",)),), started_at=1),
        _request("c1", "C", priority=1, on=(("a0", ("2",)),), started_at=5),
        _request("c2", "C", priority=1, on=(("a0", ("3",)),), started_at=6),
    ]
    decision = _decide(_state(pool, _agents(1, 4), *running, _request("v", "A", slots=2)))
    assert preempted(decision) == {"c1": "v", "c2": "v"}


def test_priority_preemption_never_takes_a_group_below_its_guarantee() -> None:
    pool = _pool(replace(SPEECH, guaranteed_slots=1), preemption_enabled=True)
    running = [
        _request("s1", "B", priority=90, on=(("a0", ("0",)),), started_at=1),
        _request("c1", "C", priority=80, on=(("a0", ("1",)),), started_at=5),
    ]
    decision = _decide(_state(pool, _agents(1, 2), *running, _request("urgent", "C", priority=1)))
    # Speech's lower-priority work is its guarantee: the request preempts its own workspace's.
    assert preempted(decision) == {"c1": "urgent"}
    decision = _decide(_state(pool, _agents(1, 2), running[0], _request("urgent", "C", priority=1)))
    assert started_ids(decision) == ["urgent"]  # the free slot, not Speech's


def test_a_gang_reclaims_whole_allocations_and_only_those_it_needs() -> None:
    # Four one-slot trials of Speech on each of two agents; Vision's guaranteed four-slot gang must
    # be on one agent: the oldest trial is on a0, but a0 cannot hold the gang without all four of
    # its own, so it takes a1's and gives back what it took from a0.
    pool = _pool(replace(VISION, guaranteed_slots=4))
    running = [
        _request("s-a0-0", "B", on=(("a0", ("0",)),), started_at=1),
        *[_request(f"s-a1-{i}", "B", on=(("a1", (str(i),)),), started_at=2 + i) for i in range(4)],
        *[_request(f"s-a0-{i}", "B", on=(("a0", (str(i),)),), started_at=10 + i) for i in range(1, 4)],
    ]
    gang = replace(_request("gang", "A", slots=4), single_agent=True)
    decision = _decide(_state(pool, _agents(2, 4), *running, gang))
    assert sorted(preempted(decision)) == ["s-a1-0", "s-a1-1", "s-a1-2", "s-a1-3"]


def test_work_younger_than_the_minimum_run_is_not_reclaimed_and_the_pool_keeps_free_slots() -> None:
    pool = _pool(replace(VISION, guaranteed_slots=3), protect_started_after_ns=100)
    running = [
        _request("young", "B", slots=2, on=(("a0", ("0", "1")),), started_at=150),
        _request("settled", "B", on=(("a0", ("2",)),), started_at=50),
    ]
    state = _state(
        pool,
        _agents(1, 4),
        *running,
        _request("gang", "A", slots=3),
        _request("other", "C", priority=1, submitted=9),
    )
    decision = _decide(state)
    # The free slot and "settled" make two: no room for three, so nothing is preempted, and the
    # free slot is kept for the gang.
    assert preempted(decision) == {}
    assert started_ids(decision) == []
    why = waiting(decision)
    assert why["gang"][0].startswith(
        "workspace 'vision' holds 0 of its 3 slots guaranteed in pool 'p'; needs 3"
    )
    assert why["other"][0].startswith("free slots are kept for 'gang': workspace 'vision' is below")
    # Once "young" has run its minimum, it is reclaimed.
    decision = _decide(replace(state, pools=(replace(pool, protect_started_after_ns=200),)))
    assert preempted(decision) == {"young": "gang"}


def test_work_larger_than_what_is_left_of_a_guarantee_waits_as_any_other() -> None:
    pool = _pool(replace(VISION, guaranteed_slots=1), preemption_enabled=True)
    running = [_request("s", "B", priority=1, on=(("a0", ("0", "1")),), slots=2, started_at=1)]
    decision = _decide(_state(pool, _agents(1, 2), *running, _request("big", "A", slots=2, priority=50)))
    assert preempted(decision) == {}
    assert "guaranteed" not in waiting(decision)["big"][0]


# ---- over time ---------------------------------------------------------------------------------


def _apply(state: ClusterState, decision: Decision, now: int) -> ClusterState:
    """The master's part: assignments start; preempted work ends and comes back as pending."""
    by_id = {r.allocation_id: r for r in state.requests}
    for a in decision.assignments:
        by_id[a.allocation_id] = replace(by_id[a.allocation_id], placements=a.placements, started_at_ns=now)
    for p in decision.preemptions:
        by_id[p.allocation_id] = replace(by_id[p.allocation_id], placements=(), started_at_ns=0)
    requests = tuple(by_id.values())
    owners = {(p.agent_id, s): r.allocation_id for r in requests for p in r.placements for s in p.slot_ids}
    agents = tuple(
        replace(a, slots=tuple(replace(s, allocation_id=owners.get((a.id, s.id), "")) for s in a.slots))
        for a in state.agents
    )
    return replace(state, agents=agents, requests=requests)


def test_a_guarantee_is_reached_within_two_passes_and_then_held() -> None:
    # Speech's long queue of urgent work fills 8 slots; Vision, guaranteed 3, comes with
    # unimportant work: it holds 3 after the pass that reclaims and the pass that starts, and
    # keeps them while Speech's queue waits.
    pool = _pool(replace(VISION, guaranteed_slots=3), preemption_enabled=True)
    speech = [_request(f"s{i}", "B", priority=1, submitted=i) for i in range(12)]
    state = _state(pool, _agents(2, 4), *speech)
    state = _apply(state, schedule(state), now=1)
    vision = [_request(f"v{i}", "A", priority=99, submitted=100 + i) for i in range(5)]
    state = replace(state, requests=(*state.requests, *vision))
    for now in range(2, 4):
        state = _apply(state, schedule(state), now=now)
    held = sum(r.slots_needed for r in state.requests if r.workspace == "A" and r.running)
    assert held == 3
    for now in range(4, 8):
        state = _apply(state, schedule(state), now=now)
        assert sum(r.slots_needed for r in state.requests if r.workspace == "A" and r.running) == 3
