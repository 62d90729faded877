"""Where requests land: best vs worst fit, slot order, multi-agent fits, zero-slot work, and
agents or slots that take no new work."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.domain.capacity import AgentCapacity
from services.scheduler.domain.fitting import (
    SCORES,
    Score,
    best_agent,
    hash_distance,
    rank_agents,
    zero_slot_score,
)
from services.scheduler.domain.model import Agent, FittingPolicy
from services.scheduler.domain.schedule import schedule
from tests.unit.scheduler.scheduler_builders import (
    agent,
    cluster,
    pending,
    pool,
    running,
    started,
    started_ids,
    waiting,
)

BEST = FittingPolicy.BEST
WORST = FittingPolicy.WORST


@pytest.mark.parametrize(
    ("policy", "expected_agent"),
    [
        # a1 has 1 free slot left after the running work, a2 is empty: best packs, worst spreads.
        pytest.param(BEST, "a1", id="best-prefers-fullest"),
        pytest.param(WORST, "a2", id="worst-prefers-emptiest"),
    ],
)
def test_policy_chooses_the_agent(policy: FittingPolicy, expected_agent: str) -> None:
    state = cluster(
        [agent("a1", 4), agent("a2", 4)],
        [running("busy", {"a1": ["0", "1", "2"]}), pending("new", 1)],
        [pool(policy=policy)],
    )
    assert list(started(schedule(state))["new"]) == [expected_agent]


def test_worst_fit_compares_the_free_share_not_the_free_count() -> None:
    # a1: 3 of 8 free (0.375); a2: 2 of 2 free (1.0). Worst fit spreads by share, so a2.
    state = cluster(
        [agent("a1", 8), agent("a2", 2)],
        [running("busy", {"a1": ["0", "1", "2", "3", "4"]}), pending("new", 1)],
        [pool(policy=WORST)],
    )
    assert list(started(schedule(state))["new"]) == ["a2"]


def test_unspecified_policy_is_best_fit() -> None:
    assert pool().fitting_policy is BEST


def test_ties_break_by_hash_distance_then_agent_id() -> None:
    agents = [agent(f"a{i}", 4) for i in range(5)]
    decision = schedule(cluster(agents, [pending("job-7.1.1", 2)]))
    expected = min((a.id for a in agents), key=lambda a: (hash_distance("job-7.1.1", a), a))
    assert list(started(decision)["job-7.1.1"]) == [expected]


@st.composite
def _agent_capacities(draw: st.DrawFn) -> list[AgentCapacity]:
    """Agents of 1-8 slots, some busy, some slots disabled, some agents taking no new work; ids
    drawn from few names' numbers so that scores tie often."""
    agents = []
    for number in draw(st.lists(st.integers(0, 40), max_size=30, unique=True)):
        slot_ids = tuple(str(i) for i in range(draw(st.integers(1, 8))))
        occupant = {slot: draw(st.sampled_from([None, None, "busy"])) for slot in slot_ids}
        enabled = frozenset(slot for slot in slot_ids if draw(st.integers(0, 9)))
        agent_capacity = AgentCapacity(f"a{number}", draw(st.integers(0, 9)) > 0, slot_ids, enabled, occupant)
        agent_capacity.zero_slot_allocations.update(f"z{i}" for i in range(draw(st.integers(0, 2))))
        agents.append(agent_capacity)
    return agents


@settings(max_examples=300, deadline=None)
@given(
    _agent_capacities(),
    st.text(min_size=1, max_size=12),
    st.sampled_from([*SCORES.values(), zero_slot_score]),
)
def test_the_best_agent_is_the_first_of_the_full_ranking(
    agents: list[AgentCapacity], allocation_id: str, score: Score
) -> None:
    """best_agent (one pass, the tie-break among the best-scored only) chooses what ranking every
    agent by (score, hash distance, id) put first."""
    request = pending(allocation_id)
    ranked = rank_agents(request, agents, score)
    chosen = best_agent(request, iter(agents), score)
    assert chosen is (ranked[0] if ranked else None)


def test_lowest_numbered_free_slots_in_numeric_order() -> None:
    a1 = agent("a1", slot_ids=["10", "2", "0", "1", "gpu-b", "gpu-a"])
    state = cluster([a1], [running("busy", {"a1": ["0"]}), pending("new", 5)])
    assert started(schedule(state))["new"] == {"a1": ("1", "2", "10", "gpu-a", "gpu-b")}


def gpu_agent(agent_id: str, nvlink: list[int], numa: list[int], used: dict[str, str] | None = None) -> Agent:
    """An agent of GPUs whose NVLink domain and NUMA node (-1: unknown) are given per slot."""
    plain = agent(agent_id, len(nvlink), used=used)
    slots = tuple(
        replace(s, nvlink_domain=d, numa_node=n) for s, d, n in zip(plain.slots, nvlink, numa, strict=True)
    )
    return replace(plain, slots=slots)


@pytest.mark.parametrize(
    ("nvlink", "numa", "expected"),
    [
        # Slot 0 is taken. Two NVLink pairs: the request gets the whole free pair, not 1 and 2.
        pytest.param([0, 0, 2, 2], [0, 0, 1, 1], ("2", "3"), id="one-nvlink-domain"),
        # An NVSwitch domain of three free and a pair of two free: best fit takes the pair.
        pytest.param([0, 0, 0, 0, 4, 4], [0] * 6, ("4", "5"), id="the-smallest-domain-that-fits"),
        # One NVSwitch domain of eight across two sockets: four on one socket, not 1-4 across both.
        pytest.param(
            [0] * 8, [0, 0, 0, 0, 1, 1, 1, 1], ("4", "5", "6", "7"), id="one-node-within-the-domain"
        ),
        # No NVLink (each GPU its own domain): one NUMA node (the sockets interleave the slots).
        pytest.param([0, 1, 2, 3], [0, 1, 0, 1], ("1", "3"), id="one-numa-node"),
        # Nothing known: the lowest-numbered free slots, as before.
        pytest.param([-1] * 4, [-1] * 4, ("1", "2"), id="unknown"),
        # Known, but no domain or node has two free: the lowest-numbered.
        pytest.param([0, 0, 2, 3], [0, 0, 1, 2], ("1", "2"), id="nothing-fits-one-group"),
    ],
)
def test_multi_gpu_work_is_packed_by_topology(
    nvlink: list[int], numa: list[int], expected: tuple[str, ...]
) -> None:
    a1 = gpu_agent("a1", nvlink, numa, used={"0": "busy"})
    state = cluster([a1], [running("busy", {"a1": ["0"]}), pending("new", len(expected))])
    assert started(schedule(state))["new"] == {"a1": expected}


def test_single_agent_request_never_spans_agents() -> None:
    state = cluster([agent("a1", 4), agent("a2", 4)], [pending("one-box", 8, single_agent=True)])
    decision = schedule(state)
    assert started_ids(decision) == []
    assert waiting(decision)["one-box"][0] == (
        "needs 8 slots on one agent; the largest agent in pool 'default' has 4 slots"
    )


@pytest.mark.parametrize(
    ("sizes", "needed", "expected_agents"),
    [
        pytest.param([4, 4, 4], 8, 2, id="two-whole-agents"),
        pytest.param([8, 4, 4], 8, 1, id="shared-fit-first"),
        pytest.param([8, 8, 4, 4], 16, 2, id="largest-size-group-first"),
        pytest.param([8, 4, 4], 12, 0, id="no-heterogeneous-fits"),
        pytest.param([4, 4, 4], 6, 0, id="must-be-a-multiple-of-the-size"),
        pytest.param([2, 2, 4], 4, 1, id="single-agent-beats-two-halves"),
        pytest.param([2, 2, 3], 4, 2, id="smaller-group-when-larger-does-not-divide"),
    ],
)
def test_dedicated_multi_agent_fit(sizes: list[int], needed: int, expected_agents: int) -> None:
    agents = [agent(f"a{i}", n) for i, n in enumerate(sizes)]
    decision = schedule(cluster(agents, [pending("dist", needed)]))
    placements = started(decision).get("dist", {})
    assert len(placements) == expected_agents
    if expected_agents:
        assert sum(len(slots) for slots in placements.values()) == needed
        for agent_id, slots in placements.items():
            size = sizes[int(agent_id[1:])]
            assert len(slots) == size  # every slot of each agent it uses


def test_dedicated_fit_uses_only_agents_with_no_slot_in_use() -> None:
    agents = [agent("a1", 4), agent("a2", 4), agent("a3", 4)]
    state = cluster(agents, [running("busy", {"a1": ["0"]}), pending("dist", 8)])
    assert set(started(schedule(state))["dist"]) == {"a2", "a3"}


def test_one_slot_request_never_takes_the_multi_agent_path() -> None:
    # A slot-less agent pool can't hold it, and a 1-slot request never spans agents.
    decision = schedule(cluster([agent("a1", 0)], [pending("one", 1)]))
    assert started_ids(decision) == []


@pytest.mark.parametrize(
    ("a1", "reason_part"),
    [
        pytest.param(agent("a1", 4, enabled=False), "agent 'a1' is disabled", id="disabled"),
        pytest.param(agent("a1", 4, draining=True), "agent 'a1' is draining", id="draining"),
        pytest.param(
            agent("a1", 4, disabled_slots=["0", "1", "2", "3"]),
            "agent 'a1' has 4 disabled slots",
            id="slots-off",
        ),
    ],
)
def test_agents_and_slots_that_take_no_new_work(a1: Agent, reason_part: str) -> None:
    decision = schedule(cluster([a1], [pending("new", 1)]))
    assert started_ids(decision) == []
    assert reason_part in waiting(decision)["new"][0]


def test_disabled_slots_are_skipped_within_an_agent() -> None:
    state = cluster([agent("a1", 4, disabled_slots=["0", "2"])], [pending("new", 2)])
    assert started(schedule(state))["new"] == {"a1": ("1", "3")}


def test_draining_agent_keeps_running_work_and_is_not_preempted_into() -> None:
    state = cluster(
        [agent("a1", 4, draining=True), agent("a2", 4)],
        [running("old", {"a1": ["0"]}), pending("new", 2)],
    )
    decision = schedule(state)
    assert started(decision)["new"] == {"a2": ("0", "1")}
    assert decision.preemptions == ()


def test_slot_marked_used_without_a_claiming_request_is_never_placed_on() -> None:
    # The master may be mid-update: the agent reports slot 0 used by an allocation it does not list.
    state = cluster([agent("a1", 2, used={"0": "ghost"})], [pending("new", 1)])
    assert started(schedule(state))["new"] == {"a1": ("1",)}


def test_slot_claimed_by_a_placement_but_not_marked_on_the_agent_is_used() -> None:
    state = cluster([agent("a1", 2)], [running("r", {"a1": ["1"]}), pending("new", 1)], mark_slots=False)
    assert started(schedule(state))["new"] == {"a1": ("0",)}


def test_zero_slot_requests_spread_over_agents_that_take_work() -> None:
    agents = [agent("a1", 4), agent("a2", 0), agent("a3", 4, enabled=False)]
    requests = [
        running("tb-old", {"a1": []}, slots=0),
        pending("tb-new", 0, submitted=1),
        pending("cmd", 0, submitted=2),
    ]
    decision = schedule(cluster(agents, requests))
    # a2 runs no zero-slot work yet (slot-less agents count); the second then ties a1/a2 at one each.
    assert started(decision)["tb-new"] == {"a2": ()}
    tie_winner = min(("a1", "a2"), key=lambda a: (hash_distance("cmd", a), a))
    assert started(decision)["cmd"] == {tie_winner: ()}


def test_zero_slot_request_waits_when_no_agent_takes_work() -> None:
    decision = schedule(cluster([agent("a1", 4, enabled=False)], [pending("tb", 0)]))
    assert waiting(decision)["tb"] == (
        "no agent in pool 'default' takes new work (agent 'a1' is disabled)",
        0,
    )


def test_agents_of_other_pools_are_not_used() -> None:
    state = cluster(
        [agent("g1", 4, pool_name="gpu")],
        [pending("cpu-job", 1, pool_name="cpu")],
        [pool("cpu"), pool("gpu")],
    )
    decision = schedule(state)
    assert started_ids(decision) == []
    assert waiting(decision)["cpu-job"][0] == "pool 'cpu' has no agents"


def test_an_excluded_agent_is_never_chosen_and_the_reason_says_so() -> None:
    """A trial's `exclude_node` log policy excludes the agents it matched on: another agent takes
    it, an equal request without the exclusion still goes where the policy prefers, and with every
    agent excluded it waits, saying why."""
    excluded = replace(pending("excluded", 1), excluded_agents=frozenset({"a1"}))
    state = cluster(
        [agent("a1", 4), agent("a2", 4)],
        [running("busy", {"a1": ["0"]}), excluded, pending("free", 1)],
    )
    decision = started(schedule(state))
    assert list(decision["excluded"]) == ["a2"] and list(decision["free"]) == ["a1"]

    alone = replace(pending("alone", 1), excluded_agents=frozenset({"a1"}))
    reason, _ = waiting(schedule(cluster([agent("a1", 4)], [alone])))["alone"]
    assert "exclude agent(s) a1" in reason
    zero = replace(pending("zero", 0), excluded_agents=frozenset({"a1"}))
    assert "zero" in waiting(schedule(cluster([agent("a1", 4)], [zero])))


def test_an_agents_topology_reaches_the_scheduler_where_the_master_says_it_has_one() -> None:
    from cairn.scheduler.v1 import scheduler_pb2 as pb
    from services.scheduler.convert import state_from_proto

    def agent(agent_id: str, known: bool) -> pb.Agent:
        return pb.Agent(
            id=agent_id,
            resource_pool="default",
            enabled=True,
            slots=[
                pb.Slot(id="0", enabled=True, nvlink_domain=0),
                pb.Slot(id="1", enabled=True, numa_node=1),
            ],
            topology_known=known,
        )

    state = state_from_proto(pb.ScheduleRequest(agents=[agent("gpu", True), agent("cpu", False)]))
    found = {a.id: [(s.nvlink_domain, s.numa_node) for s in a.slots] for a in state.agents}
    assert found == {"gpu": [(0, -1), (-1, 1)], "cpu": [(-1, -1), (-1, -1)]}
