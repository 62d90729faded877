"""A scheduling session decides exactly as `schedule` does for the same state, whatever sequence of
changes brought it there (hypothesis), and refuses changes that contradict its state."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.scheduler.domain.errors import InvalidScheduleInput
from services.scheduler.domain.model import (
    Agent,
    AllocationRequest,
    Assignment,
    ClusterState,
    Placement,
    ResourcePool,
    Slot,
)
from services.scheduler.domain.schedule import schedule
from services.scheduler.domain.session import Changes, SchedulingSession
from tests.unit.scheduler.test_scheduler_properties import PROPERTY_SETTINGS, clusters


def changes_between(before: ClusterState, after: ClusterState) -> Changes:
    """What the master would send to go from `before` to `after`."""
    old_agents = {a.id: a for a in before.agents}
    old_requests = {r.allocation_id: r for r in before.requests}
    new_agents = {a.id for a in after.agents}
    new_requests = {r.allocation_id for r in after.requests}
    return Changes(
        pools=after.pools if after.pools != before.pools else None,
        agents=tuple(a for a in after.agents if old_agents.get(a.id) != a),
        removed_agents=tuple(a for a in old_agents if a not in new_agents),
        requests=tuple(r for r in after.requests if old_requests.get(r.allocation_id) != r),
        removed_requests=tuple(r for r in old_requests if r not in new_requests),
    )


class MasterSide:
    """What the master keeps of the answers: the waiting reasons, changed as answers say."""

    def __init__(self) -> None:
        self.reasons: dict[str, str] = {}

    def take(self, state: ClusterState, answer_waiting: dict[str, str], assigned: set[str]) -> None:
        for request_id in assigned:
            self.reasons.pop(request_id, None)
        self.reasons.update(answer_waiting)
        pending = {r.allocation_id for r in state.requests if not r.running}
        self.reasons = {k: v for k, v in self.reasons.items() if k in pending}


def assert_same_decision(session: SchedulingSession, state: ClusterState, master: MasterSide) -> None:
    answer = session.decide()
    expected = schedule(state)
    assert answer.assignments == expected.assignments
    assert answer.preemptions == expected.preemptions
    master.take(
        state,
        {w.allocation_id: w.reason for w in answer.waiting},
        {a.allocation_id for a in answer.assignments},
    )
    assert master.reasons == {w.allocation_id: w.reason for w in expected.waiting}


@PROPERTY_SETTINGS
@given(st.lists(clusters(), min_size=1, max_size=4))
def test_a_session_decides_as_schedule_does_after_any_changes(states: list[ClusterState]) -> None:
    session = SchedulingSession(states[0])
    master = MasterSide()
    assert_same_decision(session, states[0], master)
    for before, after in itertools.pairwise(states):
        try:
            session.apply(changes_between(before, after))
        except InvalidScheduleInput:
            # Generated states are valid one by one; a change between two may still remove an
            # agent whose slots a request kept: the master would then send a snapshot.
            session = SchedulingSession(after)
            master = MasterSide()
        assert_same_decision(session, after, master)
        # Asking again without changes gives the same decision and no new reasons.
        again = session.decide()
        assert again.assignments == schedule(after).assignments
        assert again.waiting == ()


def with_kept(state: ClusterState, assignments: tuple[Assignment, ...]) -> ClusterState:
    """`state` with `assignments` placed as a session keeps them (keep_assignments)."""
    placed = {a.allocation_id: a.placements for a in assignments}
    return replace(
        state,
        requests=tuple(
            replace(r, placements=placed[r.allocation_id], started_at_ns=r.requested_at_ns)
            if r.allocation_id in placed
            else r
            for r in state.requests
        ),
    )


@PROPERTY_SETTINGS
@given(st.lists(clusters(), min_size=1, max_size=4), st.lists(st.booleans(), min_size=4, max_size=4))
def test_a_session_that_keeps_its_assignments_decides_as_schedule_does_over_them(
    states: list[ClusterState], keeps: list[bool]
) -> None:
    """Kept assignments are the session's state from then on, as if the master had sent them back
    placed; the master's next changes (here: to the next generated state, which may have any of
    them waiting again or gone, as for an assignment it did not apply) replace them."""
    session = SchedulingSession(states[0])
    master = MasterSide()
    held = states[0]
    for i, state in enumerate(states):
        if i:
            try:
                session.apply(changes_between(held, state))
            except InvalidScheduleInput:
                session = SchedulingSession(state)
                master = MasterSide()
        held = state
        answer = session.decide()
        assert answer.assignments == schedule(state).assignments
        master.take(state, {w.allocation_id: w.reason for w in answer.waiting}, set())
        if keeps[i]:
            session.keep(answer.assignments)
            held = with_kept(state, answer.assignments)
            master.take(held, {}, {a.allocation_id for a in answer.assignments})
            assert_same_decision(session, held, master)


def test_kept_assignments_are_not_placed_again_and_a_request_sent_back_waiting_is() -> None:
    state = _queue(6, 2)  # 8 slots
    session = SchedulingSession(state)
    first = session.decide()
    assert len(first.assignments) == 6
    session.keep(first.assignments)
    assert session.decide().assignments == ()
    # The master could not apply one: it sends it again as it stands, waiting.
    unapplied = next(r for r in state.requests if r.allocation_id == first.assignments[0].allocation_id)
    session.apply(Changes(requests=(unapplied,)))
    again = session.decide()
    assert [a.allocation_id for a in again.assignments] == [unapplied.allocation_id]


def _queue(n: int, slots: int) -> ClusterState:
    agents = tuple(
        Agent(f"a{i}", "default", slots=tuple(Slot(str(s)) for s in range(slots))) for i in range(4)
    )
    requests = tuple(
        AllocationRequest(f"q{i:05d}", "default", 1, requested_at_ns=i, job_id="j") for i in range(n)
    )
    return ClusterState(pools=(ResourcePool("default"),), agents=agents, requests=requests)


def test_a_long_queue_before_a_full_pool_turns_over_one_request_at_a_time() -> None:
    """Trials end, the next in line starts, new ones join the back of the queue (and one jumps to
    its front): the session keeps agreeing with `schedule` while looking at few requests."""
    state = _queue(2_000, 2)
    session = SchedulingSession(state)
    master = MasterSide()
    assert_same_decision(session, state, master)
    for turn in range(30):
        requests = {r.allocation_id: r for r in state.requests}
        answer = session.decide()
        changed: list[AllocationRequest] = []
        for assignment in answer.assignments:
            placed = replace(requests[assignment.allocation_id], placements=assignment.placements)
            requests[placed.allocation_id] = placed
            changed.append(placed)
        ended = [r.allocation_id for r in requests.values() if r.running][: turn % 3]
        for request_id in ended:
            del requests[request_id]
        changed = [r for r in changed if r.allocation_id not in ended]
        newcomer = AllocationRequest(f"n{turn:05d}", "default", 1, requested_at_ns=10_000 + turn, job_id="j")
        urgent = AllocationRequest(f"u{turn:05d}", "default", 1, priority=1, job_id="u")
        requests[newcomer.allocation_id] = newcomer
        changed.append(newcomer)
        if turn % 5 == 0:
            requests[urgent.allocation_id] = urgent
            changed.append(urgent)
        state = replace(state, requests=tuple(requests.values()))
        session.apply(Changes(requests=tuple(changed), removed_requests=tuple(ended)))
        assert_same_decision(session, state, master)


def test_a_change_that_double_books_a_slot_is_refused_naming_the_field() -> None:
    state = ClusterState(
        pools=(ResourcePool("default"),),
        agents=(Agent("a0", "default", slots=(Slot("0"),)),),
        requests=(AllocationRequest("r1", "default", 1, placements=(Placement("a0", ("0",)),)),),
    )
    session = SchedulingSession(state)
    with pytest.raises(InvalidScheduleInput) as refused:
        session.apply(
            Changes(requests=(AllocationRequest("r2", "default", 1, placements=(Placement("a0", ("0",)),)),))
        )
    assert refused.value.field == "requests[0].placements[0].slot_ids[0]"
    assert "also placed for 'r1'" in refused.value.problem


def test_removing_an_agent_that_still_runs_work_is_refused() -> None:
    state = ClusterState(
        pools=(ResourcePool("default"),),
        agents=(Agent("a0", "default", slots=(Slot("0"),)),),
        requests=(AllocationRequest("r1", "default", 1, placements=(Placement("a0", ("0",)),)),),
    )
    with pytest.raises(InvalidScheduleInput) as refused:
        SchedulingSession(state).apply(Changes(removed_agents=("a0",)))
    assert refused.value.field == "removed_agents[0]"


def test_a_request_both_changed_and_removed_is_refused() -> None:
    state = ClusterState(pools=(ResourcePool("default"),))
    request = AllocationRequest("r1", "default", 1)
    with pytest.raises(InvalidScheduleInput) as refused:
        SchedulingSession(state).apply(Changes(requests=(request,), removed_requests=("r1",)))
    assert refused.value.field == "removed_requests[0]"
