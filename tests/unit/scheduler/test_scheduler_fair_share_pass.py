"""What a fair-share pass costs, and that what makes it cheap changes no decision: stopping early
decides as looking at every request one by one does; a session's pass, reading the FairQueue it
keeps, decides as `schedule` does from scratch, whatever changes came in between (hypothesis); and
a pass after one change on a large pool looks at a handful of requests, not the queue (counted,
not timed: bench/fair_share_pass.py has the times)."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from services.scheduler.domain.capacity import build_pool_capacity
from services.scheduler.domain.fair_queue import FairQueue
from services.scheduler.domain.fair_share import run_fair_share_pass
from services.scheduler.domain.model import (
    Agent,
    AllocationRequest,
    ClusterState,
    Decision,
    Placement,
    PoolShares,
    ResourcePool,
    SchedulerType,
    ShareGroup,
    Slot,
)
from services.scheduler.domain.priority_pass import PassOutcome
from services.scheduler.domain.reasons import PoolFacts
from services.scheduler.domain.schedule import schedule
from services.scheduler.domain.session import Changes, SchedulingSession, SessionAnswer, Work
from tests.unit.scheduler.fair_share_states import fair_clusters, next_state
from tests.unit.scheduler.test_scheduler_properties import PROPERTY_SETTINGS
from tests.unit.scheduler.test_scheduler_session import MasterSide, assert_same_decision, changes_between


def _pass(state: ClusterState, stop_early: bool) -> PassOutcome:
    pool = state.pools[0]
    slotted = [r for r in state.requests if r.slots_needed > 0]
    return run_fair_share_pass(
        pool,
        PoolFacts.of(pool.name, state.agents),
        build_pool_capacity(state.agents, state.requests),
        FairQueue(pool, slotted),
        stop_early=stop_early,
    )


@PROPERTY_SETTINGS
@given(fair_clusters(), st.integers(0, 2**32 - 1))
def test_stopping_early_decides_as_taking_every_request_one_by_one(state: ClusterState, seed: int) -> None:
    rng = random.Random(seed)
    for step in range(5):
        early, every = _pass(state, stop_early=True), _pass(state, stop_early=False)
        assert [(r.allocation_id, fit) for r, fit in early.started] == [
            (r.allocation_id, fit) for r, fit in every.started
        ]
        assert early.preemptions == every.preemptions
        assert early.all_waiting() == every.all_waiting()
        assert early.shares == every.shares
        assert early.examined <= every.examined
        state = next_state(state, schedule(state), rng, step)


@PROPERTY_SETTINGS
@given(fair_clusters(), st.integers(0, 2**32 - 1))
def test_a_session_decides_a_fair_share_pool_as_schedule_does_after_any_changes(
    state: ClusterState, seed: int
) -> None:
    """Passes that start, reclaim, lend and hold for quotas, with arrivals, ends, kills and new
    settings between them: each pass of the session (its FairQueue kept, its reasons reported
    only when changed) is the whole decision of the same state."""
    rng = random.Random(seed)
    session = SchedulingSession(state)
    master = MasterSide()
    for step in range(8):
        answer, expected = session.decide(), schedule(state)
        assert (answer.assignments, answer.preemptions) == (expected.assignments, expected.preemptions)
        # A pass tells the pool's division; once its work has all ended, that it has none, once.
        assert answer.shares in ((), expected.shares or (PoolShares("p"),))
        master.take(state, _reasons(answer), {a.allocation_id for a in answer.assignments})
        assert master.reasons == _reasons(expected)
        after = next_state(state, expected, rng, step)
        session.apply(changes_between(state, after))
        state = after


def _reasons(answer: SessionAnswer | Decision) -> dict[str, str]:
    return {w.allocation_id: w.reason for w in answer.waiting}


# ---- what a pass after one change looks at -------------------------------------------------------

AGENTS, SLOTS, WAITING, WORKSPACES, USERS = 200, 8, 5_000, 10, 7


def _full_pool(weights: tuple[float, ...] = ()) -> ClusterState:
    """AGENTS x SLOTS slots all busy with one-slot work of WORKSPACES workspaces (USERS users each,
    5 jobs a user), WAITING one-slot requests waiting: bench/fair_share_pass.py's pool, smaller."""
    groups = tuple(ShareGroup(f"w{i}", weight=w) for i, w in enumerate(weights))
    pool = ResourcePool("p", scheduler_type=SchedulerType.FAIR_SHARE, workspaces=groups)
    agents = tuple(
        Agent(f"a{i}", "p", slots=tuple(Slot(str(s), allocation_id=f"r{i}-{s}") for s in range(SLOTS)))
        for i in range(AGENTS)
    )

    def owner(k: int) -> dict[str, str]:
        ws = f"w{k % WORKSPACES}"
        return {"workspace": ws, "user": f"{ws}/u{k % USERS}", "job_id": f"j{k % (WORKSPACES * 5)}"}

    running = tuple(
        AllocationRequest(
            f"r{i}-{s}",
            "p",
            1,
            preemptible=True,
            placements=(Placement(f"a{i}", (str(s),)),),
            started_at_ns=i,
            **owner(i),
        )
        for i in range(AGENTS)
        for s in range(SLOTS)
    )
    waiting = tuple(
        AllocationRequest(f"q{k}", "p", 1, requested_at_ns=k, preemptible=True, **owner(k))
        for k in range(WAITING)
    )
    return ClusterState((pool,), agents, running + waiting)


def _after(
    session: SchedulingSession, state: ClusterState, master: MasterSide, changes: Changes
) -> tuple[ClusterState, SessionAnswer, Work]:
    """Apply `changes` to the session and to `state`; the session's next answer (checked against
    the whole decision) and what it looked at."""
    requests = {r.allocation_id: r for r in state.requests}
    for request_id in changes.removed_requests:
        del requests[request_id]
    requests.update((r.allocation_id, r) for r in changes.requests)
    agents = {a.id: a for a in state.agents}
    agents.update((a.id, a) for a in changes.agents)
    after = ClusterState(changes.pools or state.pools, tuple(agents.values()), tuple(requests.values()))
    session.apply(changes)
    answer = session.decide()
    expected = schedule(after)
    assert (answer.assignments, answer.preemptions) == (expected.assignments, expected.preemptions)
    master.take(after, _reasons(answer), {a.allocation_id for a in answer.assignments})
    assert master.reasons == _reasons(expected)
    return after, answer, session.work


def test_a_pass_with_one_change_looks_at_what_changed_not_the_queue() -> None:
    """Every workspace at its share of a full pool, 5,000 requests waiting for a slot: the whole
    decision looks at none of them one by one (each user's are lent, and no slot is free), and a
    pass after a change looks at the few the change concerns."""
    state = _full_pool()
    session = SchedulingSession(state)
    master = MasterSide()
    assert_same_decision(session, state, master)
    assert session.work.examined == 0
    assert session.work.reasons_compared == WAITING  # the first answer tells every reason

    # A request arrives: its reason is told, no other is looked at.
    arrival = AllocationRequest(
        "new", "p", 1, job_id="jx", workspace="w1", user="w1/u1", requested_at_ns=10**6
    )
    state, _, work = _after(session, state, master, Changes(requests=(arrival,)))
    assert (work.examined, work.reasons_compared) == (0, 1)

    # One trial ends: its workspace is a slot below its share, and its most deprived user's next
    # request starts in the slot.
    changes = Changes(removed_requests=("r3-0",), agents=(_free(state, "a3", "0"),))
    state, answer, work = _after(session, state, master, changes)
    assert len(answer.assignments) == 1
    assert (work.examined, work.reasons_compared) == (1, 0)
    # The master places it.
    (started,) = answer.assignments
    placed = replace(
        _request(state, started.allocation_id), placements=started.placements, started_at_ns=10**6
    )
    state, answer, work = _after(session, state, master, Changes(requests=(placed,)))
    assert not answer.assignments and (work.examined, work.reasons_compared) == (0, 0)

    # A waiting request is killed, and the pool's settings change (recent usage, as on most
    # passes; the same for every workspace, so the shares stay).
    usage = tuple(ShareGroup(f"w{i}", recent_slot_seconds=3600.0) for i in range(WORKSPACES))
    changes = Changes(pools=(replace(state.pools[0], workspaces=usage),), removed_requests=("q77",))
    state, _, work = _after(session, state, master, changes)
    assert (work.examined, work.reasons_compared) == (0, 0)


def _request(state: ClusterState, request_id: str) -> AllocationRequest:
    (request,) = [r for r in state.requests if r.allocation_id == request_id]
    return request


def _free(state: ClusterState, agent_id: str, slot_id: str) -> Agent:
    (agent,) = [a for a in state.agents if a.id == agent_id]
    return replace(
        agent, slots=tuple(replace(s, allocation_id="") if s.id == slot_id else s for s in agent.slots)
    )


def test_a_pass_that_reclaims_costs_its_reclaims_and_labels_the_rest_by_group() -> None:
    """Weights 1:2:3: the heavier workspaces reclaim from the lighter ones until those are down
    to their shares; then the rest wait, labelled by user and shape, not looked at one by one."""
    state = _full_pool(weights=tuple(1.0 + i % 3 for i in range(WORKSPACES)))
    outcome = _pass(state, stop_early=True)
    reclaimed = {p.for_allocation_id for p in outcome.preemptions}
    assert reclaimed
    assert outcome.examined <= len(reclaimed) + USERS
    assert len(outcome.all_waiting()) == WAITING
