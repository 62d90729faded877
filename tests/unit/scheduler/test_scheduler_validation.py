"""Contradictory input is refused with the field that is wrong, and nothing is decided."""

from __future__ import annotations

import dataclasses

import pytest

from services.scheduler.domain.errors import InvalidScheduleInput
from services.scheduler.domain.model import Agent, ClusterState, Placement, ResourcePool, Slot
from services.scheduler.domain.schedule import schedule
from tests.unit.scheduler.scheduler_builders import agent, cluster, pending, pool, running

A1 = agent("a1", 2)
A2 = agent("a2", 2)


def _with_placement(allocation_id: str, *placements: Placement) -> ClusterState:
    request = dataclasses.replace(pending(allocation_id, 1), placements=placements)
    return cluster([A1, A2], [pending("ok", 1), request], mark_slots=False)


@pytest.mark.parametrize(
    ("state", "message"),
    [
        pytest.param(
            cluster([A1], [pending("x", 1), pending("y", 1), pending("x", 2)]),
            "requests[2].allocation_id: duplicate allocation id 'x'",
            id="duplicate-allocation",
        ),
        pytest.param(
            cluster([A1], [pending("x", 1), pending("y", 1), pending("z", 1), pending("w", -1)]),
            "requests[3].slots_needed: must be >= 0",
            id="negative-slots",
        ),
        pytest.param(
            cluster([A1], [pending("x", 1, priority=-3)]),
            "requests[0].priority: must be >= 0 (0 means the pool's default)",
            id="negative-priority",
        ),
        pytest.param(
            cluster([A1], [pending("", 1)]), "requests[0].allocation_id: must not be empty", id="empty-id"
        ),
        pytest.param(
            cluster([A1], [pending("x", 1, pool_name="")]),
            "requests[0].resource_pool: must not be empty",
            id="empty-pool-name",
        ),
        pytest.param(
            _with_placement("p", Placement("a9", ("0",))),
            "requests[1].placements[0].agent_id: unknown agent 'a9'",
            id="unknown-agent",
        ),
        pytest.param(
            _with_placement("p", Placement("a1", ("0",)), Placement("a2", ("0", "7"))),
            "requests[1].placements[1].slot_ids[1]: unknown slot '7' on agent 'a2'",
            id="unknown-slot",
        ),
        pytest.param(
            _with_placement("p", Placement("a1", ("0", "0"))),
            "requests[1].placements[0].slot_ids[1]: slot '0' is listed twice",
            id="slot-twice",
        ),
        pytest.param(
            _with_placement("p", Placement("a1", ("0",)), Placement("a1", ("1",))),
            "requests[1].placements[1].agent_id: agent 'a1' appears in two placements",
            id="agent-twice",
        ),
        pytest.param(
            cluster([A1], [running("r1", {"a1": ["0"]}), running("r2", {"a1": ["1", "0"]})]),
            "requests[1].placements[0].slot_ids[1]: slot '0' on agent 'a1' is also placed for 'r1'",
            id="slot-double-booked",
        ),
        pytest.param(
            cluster([A1, A2, agent("a1", 4)], []),
            "agents[2].id: duplicate agent id 'a1'",
            id="duplicate-agent",
        ),
        pytest.param(cluster([agent("", 1)], []), "agents[0].id: must not be empty", id="empty-agent-id"),
        pytest.param(
            cluster([Agent("a1", "default", slots=(Slot("0"), Slot("1"), Slot("0")))], []),
            "agents[0].slots[2].id: duplicate slot id '0' on agent 'a1'",
            id="duplicate-slot",
        ),
        pytest.param(
            cluster([Agent("a1", "default", slots=(Slot(""),))], []),
            "agents[0].slots[0].id: must not be empty",
            id="empty-slot-id",
        ),
        pytest.param(
            cluster([A1], [], [pool("p"), pool("q"), pool("p")]),
            "pools[2].name: duplicate pool name 'p'",
            id="duplicate-pool",
        ),
        pytest.param(
            cluster([A1], [], [ResourcePool("")]), "pools[0].name: must not be empty", id="empty-pool"
        ),
        pytest.param(
            cluster([A1], [], [pool(default_priority=-1)]),
            "pools[0].default_priority: must be >= 0",
            id="negative-default-priority",
        ),
    ],
)
def test_invalid_state_is_refused_naming_the_field(state: ClusterState, message: str) -> None:
    with pytest.raises(InvalidScheduleInput) as caught:
        schedule(state)
    assert str(caught.value) == message
    assert message.startswith(caught.value.field + ": ")


def test_agent_of_an_unconfigured_pool_is_not_an_error() -> None:
    decision = schedule(cluster([agent("lost", 2, pool_name="retired")], [pending("x", 1)]))
    assert [w.allocation_id for w in decision.waiting] == ["x"]
