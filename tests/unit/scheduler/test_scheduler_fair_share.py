"""Fair share (services/scheduler/domain/fair_share.py, shares.py) as a decision function: the
division of slots, the order work starts in, lending and reclaiming, quotas; and, over simulated
time with the decisions applied, that shares converge to what each workspace is entitled to and
that no request starves."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.domain.model import (
    Agent,
    AllocationRequest,
    ClusterState,
    Placement,
    ResourcePool,
    SchedulerType,
    ShareGroup,
    Slot,
)
from services.scheduler.domain.schedule import schedule
from services.scheduler.domain.session import Changes, SchedulingSession
from services.scheduler.domain.shares import Claim, divide, usage_adjusted

FAIR = SchedulerType.FAIR_SHARE


def _pool(*workspaces: ShareGroup, users: tuple[ShareGroup, ...] = ()) -> ResourcePool:
    return ResourcePool(name="p", scheduler_type=FAIR, workspaces=workspaces, users=users)


def _agents(count: int, slots: int) -> tuple[Agent, ...]:
    return tuple(
        Agent(id=f"a{i}", resource_pool="p", slots=tuple(Slot(str(s)) for s in range(slots)))
        for i in range(count)
    )


def _request(
    rid: str, ws: str, user: str = "", slots: int = 1, job: str = "", priority: int = 0, **extra: object
) -> AllocationRequest:
    return AllocationRequest(
        allocation_id=rid,
        resource_pool="p",
        slots_needed=slots,
        priority=priority,
        job_id=job or f"job-{rid}",
        preemptible=True,
        workspace=ws,
        user=user or f"{ws}/u",
        **extra,  # type: ignore[arg-type]
    )


# ---- the division ------------------------------------------------------------------------------


def test_slots_are_divided_by_weight_up_to_what_each_wants_in_whole_slots() -> None:
    claims = [Claim("a", 1, 100), Claim("b", 1, 100), Claim("c", 2, 100)]
    assert divide(64, claims) == {"a": 16, "b": 16, "c": 32}
    # What one does not want goes to the others, by their weights.
    assert divide(64, [Claim("a", 1, 4), Claim("b", 1, 100), Claim("c", 2, 100)]) == {
        "a": 4,
        "b": 20,
        "c": 40,
    }
    # Whole slots by largest remainder, adding up to exactly what is divided.
    thirds = divide(10, [Claim(k, 1, 10) for k in "xyz"])
    assert sorted(thirds.values()) == [3, 3, 4] and sum(thirds.values()) == 10
    assert divide(10, [Claim("a", 1, 3)]) == {"a": 3}  # never more than wanted
    assert divide(0, [Claim("a", 1, 3)]) == {"a": 0}


def test_guarantees_come_first_and_caps_are_never_passed() -> None:
    claims = [Claim("small", 1, 20, guaranteed=12), Claim("big", 9, 100)]
    assert divide(20, claims) == {"small": 12, "big": 8}
    capped = [Claim("a", 10, 100, cap=5), Claim("b", 1, 100)]
    assert divide(20, capped) == {"a": 5, "b": 15}
    # Guarantees that promise more than there is are scaled down, still summing to the total.
    over = divide(10, [Claim("a", 1, 20, guaranteed=10), Claim("b", 1, 20, guaranteed=10)])
    assert over == {"a": 5, "b": 5}


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 200),
    st.lists(
        st.tuples(
            st.floats(0.1, 10),
            st.integers(0, 80),
            st.integers(0, 30),
            st.one_of(st.none(), st.integers(0, 60)),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_a_division_adds_up_and_keeps_every_bound(
    total: int, raw: list[tuple[float, int, int, int | None]]
) -> None:
    claims = [Claim(f"k{i}", w, d, g, c) for i, (w, d, g, c) in enumerate(raw)]
    shares = divide(total, claims)
    rooms = {c.key: c.room for c in claims}
    assert sum(shares.values()) == min(total, sum(rooms.values()))
    for claim in claims:
        assert 0 <= shares.get(claim.key, 0) <= rooms[claim.key]
    promised = sum(min(c.guaranteed, c.room) for c in claims)
    if promised <= total:
        for claim in claims:  # a guarantee holds whenever all of them fit
            assert shares.get(claim.key, 0) >= min(claim.guaranteed, claim.room)


def test_recent_usage_lowers_a_weight_as_slurms_factor_does() -> None:
    weights = {"idle": 1.0, "busy": 1.0}
    adjusted = usage_adjusted(weights, {"busy": 3600.0})
    assert adjusted["idle"] == 1.0 and adjusted["busy"] == pytest.approx(0.25)  # 2^(-1/0.5)
    assert usage_adjusted(weights, {}) == weights
    even = usage_adjusted({"a": 1.0, "b": 3.0}, {"a": 25.0, "b": 75.0})
    assert even["a"] == pytest.approx(0.5) and even["b"] == pytest.approx(1.5)  # used exactly its share


# ---- one pass ----------------------------------------------------------------------------------


def test_a_lone_workspace_borrows_the_whole_pool_and_gives_it_back_when_another_comes() -> None:
    pool = _pool()
    agents = _agents(1, 4)
    alone = schedule(ClusterState((pool,), agents, tuple(_request(f"a{i}", "A") for i in range(4))))
    assert len(alone.assignments) == 4  # idle slots are lent

    placed = tuple(
        _request(f"a{i}", "A", placements=(Placement("a0", (str(i),)),), started_at_ns=i) for i in range(4)
    )
    agents = (replace(agents[0], slots=tuple(Slot(str(i), allocation_id=f"a{i}") for i in range(4))),)
    newcomer = (_request("b0", "B"), _request("b1", "B"))
    decision = schedule(ClusterState((pool,), agents, (*placed, *newcomer)))
    # B is entitled to half: two of A's slots are reclaimed, the oldest-placed first, one for each.
    assert [(p.allocation_id, p.for_allocation_id) for p in decision.preemptions] == [
        ("a0", "b0"),
        ("a1", "b1"),
    ]
    waiting = {w.allocation_id: w.reason for w in decision.waiting}
    assert all("reclaiming its fair share of pool 'p'" in waiting[b] for b in ("b0", "b1"))
    assert not decision.assignments
    # The division as people read it: A borrows two slots of B's nominal share.
    (division,) = decision.shares
    assert [
        (g.key, g.nominal_slots, g.entitled_slots, g.held_slots, g.wanted_slots) for g in division.workspaces
    ] == [
        ("A", 2, 2, 4, 4),
        ("B", 2, 2, 0, 2),
    ]
    assert [g.name for g in division.users] == ["user 'A/u'", "user 'B/u'"]


def test_within_a_workspace_users_share_and_within_a_user_priority_orders_the_jobs() -> None:
    pool = _pool()
    requests = (
        _request("x-low", "W", "W/x", priority=60, job="x1"),
        _request("x-high", "W", "W/x", priority=10, job="x2"),
        _request("x-high2", "W", "W/x", priority=10, job="x2"),
        _request("y1", "W", "W/y", job="y1"),
        _request("y2", "W", "W/y", job="y1"),
    )
    decision = schedule(ClusterState((pool,), _agents(1, 2), requests))
    # Two slots, two users: one each; x's higher-priority job first.
    assert sorted(a.allocation_id for a in decision.assignments) == ["x-high", "y1"]


def test_a_maximum_is_never_passed_even_with_idle_slots_and_names_the_quota() -> None:
    pool = _pool(ShareGroup("A", max_slots=2, name="workspace 'vision'"))
    decision = schedule(ClusterState((pool,), _agents(1, 8), tuple(_request(f"a{i}", "A") for i in range(5))))
    assert len(decision.assignments) == 2
    reason = {w.allocation_id: w.reason for w in decision.waiting}["a2"]
    assert "workspace 'vision' holds 2 slots of its maximum of 2 in pool 'p'" in reason


def test_work_younger_than_the_minimum_run_is_not_reclaimed() -> None:
    agent = Agent("a0", "p", slots=(Slot("0", allocation_id="old"), Slot("1", allocation_id="young")))
    running = (
        _request("old", "A", placements=(Placement("a0", ("0",)),), started_at_ns=100),
        _request("young", "A", placements=(Placement("a0", ("1",)),), started_at_ns=300),
    )
    wants = (_request("b0", "B"), _request("b1", "B"))
    protected = replace(_pool(), protect_started_after_ns=200)
    decision = schedule(ClusterState((protected,), (agent,), (*running, *wants)))
    # B is entitled to one slot: the old placement is reclaimed, the young one is left running.
    assert [(p.allocation_id, p.for_allocation_id) for p in decision.preemptions] == [("old", "b0")]


def test_a_lowered_maximum_gives_back_the_youngest_placements() -> None:
    pool = _pool(ShareGroup("A", max_slots=1))
    agent = Agent("a0", "p", slots=tuple(Slot(str(i), allocation_id=f"a{i}") for i in range(3)))
    placed = tuple(
        _request(f"a{i}", "A", placements=(Placement("a0", (str(i),)),), started_at_ns=i) for i in range(3)
    )
    decision = schedule(ClusterState((pool,), (agent,), placed))
    assert [(p.allocation_id, p.for_allocation_id) for p in decision.preemptions] == [("a2", ""), ("a1", "")]


def test_a_gang_is_reclaimed_whole_and_never_below_a_borrowers_share() -> None:
    pool = _pool()
    agents = (
        Agent("a0", "p", slots=tuple(Slot(str(i), allocation_id="big") for i in range(4))),
        Agent("a1", "p", slots=tuple(Slot(str(i), allocation_id=f"s{i}") for i in range(4))),
    )
    big = _request("big", "A", slots=4, placements=(Placement("a0", ("0", "1", "2", "3")),), started_at_ns=1)
    smalls = tuple(
        _request(f"s{i}", "A", placements=(Placement("a1", (str(i),)),), started_at_ns=2 + i)
        for i in range(4)
    )
    want = _request("b", "B", slots=4, single_agent=True)
    decision = schedule(ClusterState((pool,), agents, (big, *smalls, want)))
    # A holds 8 of its 4; B is entitled to 4: the oldest, the 4-slot gang, is taken whole.
    assert [p.allocation_id for p in decision.preemptions] == ["big"]
    # Nothing is taken that would drop a workspace below its share: A holds 5 of its 4 on one
    # 6-slot agent; B wants 2 (one slot is free). The oldest, the gang, would leave A with 1: the
    # younger single slot is taken instead.
    agent = Agent(
        "a0",
        "p",
        slots=(
            *(Slot(str(i), allocation_id="gang") for i in range(4)),
            Slot("4", allocation_id="one"),
            Slot("5"),
        ),
    )
    gang = _request(
        "gang", "A", slots=4, placements=(Placement("a0", ("0", "1", "2", "3")),), started_at_ns=1
    )
    one = _request("one", "A", placements=(Placement("a0", ("4",)),), started_at_ns=2)
    decision = schedule(ClusterState((pool,), (agent,), (gang, one, _request("b", "B", slots=2))))
    assert [(p.allocation_id, p.for_allocation_id) for p in decision.preemptions] == [("one", "b")]


def test_a_deprived_request_that_cannot_fit_keeps_the_free_slots_from_borrowers() -> None:
    pool = _pool()
    # B holds 3 of 4 (non-preemptible work: nothing to reclaim); A wants 2, entitled to 2.
    agents = (
        Agent(
            "a0",
            "p",
            slots=(
                Slot("0", allocation_id="b0"),
                Slot("1", allocation_id="b1"),
                Slot("2"),
                Slot("3", allocation_id="b2"),
            ),
        ),
    )
    running = tuple(
        replace(_request(f"b{i}", "B", placements=(Placement("a0", (s,)),)), preemptible=False)
        for i, s in enumerate(("0", "1", "3"))
    )
    decision = schedule(
        ClusterState((pool,), agents, (*running, _request("a", "A", slots=2), _request("b9", "B")))
    )
    assert not decision.assignments and not decision.preemptions
    reasons = {w.allocation_id: w.reason for w in decision.waiting}
    assert "holds 0 of the 2 slots its fair share gives it" in reasons["a"]
    assert "free slots are kept for 'a'" in reasons["b9"]


# ---- over time ---------------------------------------------------------------------------------


@dataclass
class _Job:
    request: AllocationRequest
    remaining: int  # passes it still runs once placed


def _simulate(
    pool: ResourcePool,
    agents: tuple[Agent, ...],
    backlog: dict[str, list[_Job]],
    passes: int,
    arrivals: dict[int, dict[str, list[_Job]]] | None = None,
) -> tuple[list[Counter[str]], dict[str, int]]:
    """Run `passes` scheduling passes with their decisions applied: assignments start, preempted
    work goes back to the queue (it resumes from its checkpoint), finished work leaves. Returns the
    slots each workspace held after every pass, and when each request first started."""
    slot_owner: dict[tuple[str, str], str] = {}
    running: dict[str, tuple[_Job, tuple[Placement, ...]]] = {}
    queue = [job for jobs in backlog.values() for job in jobs]
    started_at: dict[str, int] = {}
    held_over_time: list[Counter[str]] = []
    for step in range(passes):
        for jobs in (arrivals or {}).get(step, {}).values():
            queue.extend(jobs)
        live_agents = tuple(
            replace(
                a, slots=tuple(Slot(s.id, allocation_id=slot_owner.get((a.id, s.id), "")) for s in a.slots)
            )
            for a in agents
        )
        requests = [
            replace(job.request, placements=placements, started_at_ns=started_at[rid])
            for rid, (job, placements) in running.items()
        ] + [job.request for job in queue]
        decision = schedule(ClusterState((pool,), live_agents, tuple(requests)))
        by_id = {job.request.allocation_id: job for job in queue}
        for assignment in decision.assignments:
            job = by_id[assignment.allocation_id]
            queue.remove(job)
            running[assignment.allocation_id] = (job, assignment.placements)
            started_at.setdefault(assignment.allocation_id, step)
            for placement in assignment.placements:
                for slot in placement.slot_ids:
                    slot_owner[(placement.agent_id, slot)] = assignment.allocation_id
        for preemption in decision.preemptions:
            job, placements = running.pop(preemption.allocation_id)
            for placement in placements:
                for slot in placement.slot_ids:
                    del slot_owner[(placement.agent_id, slot)]
            queue.append(job)
        for rid in list(running):
            job, placements = running[rid]
            job.remaining -= 1
            if job.remaining <= 0:
                del running[rid]
                for placement in placements:
                    for slot in placement.slot_ids:
                        del slot_owner[(placement.agent_id, slot)]
        held = Counter[str]()
        for job, _ in running.values():
            held[job.request.workspace] += job.request.slots_needed
        held_over_time.append(held)
    return held_over_time, started_at


def _backlog(ws: str, count: int, length: int, slots: int = 1) -> list[_Job]:
    return [_Job(_request(f"{ws}{i}", ws, slots=slots), length) for i in range(count)]


def test_backlogged_workspaces_converge_to_their_weighted_shares() -> None:
    pool = _pool(ShareGroup("A", weight=1), ShareGroup("B", weight=1), ShareGroup("C", weight=2))
    agents = _agents(4, 4)  # 16 slots
    # A arrives first and takes everything; B and C arrive on the next pass.
    later = {1: {"B": _backlog("B", 200, 1000), "C": _backlog("C", 200, 1000)}}
    held, _ = _simulate(pool, agents, {"A": _backlog("A", 200, 1000)}, passes=12, arrivals=later)
    assert held[0]["A"] == 16
    assert held[-1] == Counter({"A": 4, "B": 4, "C": 8})


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_no_request_starves_and_every_slot_works_while_anything_waits(seed: int) -> None:
    rng = random.Random(seed)
    pool = _pool(*(ShareGroup(w, weight=rng.choice([1.0, 2.0])) for w in "ABC"))
    agents = _agents(2, 4)
    backlog = {
        w: [
            _Job(_request(f"{w}{i}", w, slots=rng.choice([1, 1, 2, 4]), single_agent=True), rng.randint(1, 6))
            for i in range(rng.randint(1, 12))
        ]
        for w in "ABC"
    }
    total = sum(len(jobs) for jobs in backlog.values())
    held, started = _simulate(pool, agents, backlog, passes=400)
    assert len(started) == total  # everyone started
    assert sum(held[-1].values()) == 0  # and finished


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("gangs", [1, 2, 8])
def test_a_gang_reclaims_on_one_agent_rather_than_scattered_oldest_slots(seed: int, gangs: int) -> None:
    # Eight full agents of A's one-slot work, placed in random age order; B wants `gangs` four-slot
    # trials (entitled to all of them: 4 x gangs <= 32). Taking the oldest across the pool until a
    # gang fits scattered the victims: one gang found no room before A was down to its share (no
    # preemption at all, B waited for A's work to end), and eight took 32 slots for room for five.
    rng = random.Random(seed)
    ages = rng.sample(range(1, 1000), 64)
    running = [
        _request(f"a{k}", "A", placements=(Placement(f"n{k % 8}", (str(k // 8),)),), started_at_ns=ages[k])
        for k in range(64)
    ]
    agents = tuple(
        Agent(f"n{i}", "p", slots=tuple(Slot(str(s), allocation_id=f"a{s * 8 + i}") for s in range(8)))
        for i in range(8)
    )
    wanting = [_request(f"b{i}", "B", slots=4, job="jb") for i in range(gangs)]
    decision = schedule(ClusterState((_pool(),), agents, (*running, *wanting)))
    # Four victims a gang, on one agent each, and every gang has its room.
    assert len(decision.preemptions) == 4 * gangs
    assert {p.for_allocation_id for p in decision.preemptions} == {f"b{i}" for i in range(gangs)}
    by_gang: dict[str, set[str]] = {}
    for p in decision.preemptions:
        by_gang.setdefault(p.for_allocation_id, set()).add(f"n{int(p.allocation_id[1:]) % 8}")
    assert all(len(hosts) == 1 for hosts in by_gang.values())


def test_a_session_says_a_fair_share_pool_is_no_longer_divided_once_its_work_has_ended() -> None:
    state = ClusterState((_pool(),), _agents(1, 2), (_request("a0", "A"),))
    session = SchedulingSession(state)
    (division,) = session.decide().shares
    assert [g.key for g in division.workspaces] == ["A"]
    session.apply(Changes(removed_requests=("a0",)))
    (ended,) = session.decide().shares
    assert ended.resource_pool == "p" and not ended.workspaces and not ended.users
    assert session.decide().shares == ()  # said once
