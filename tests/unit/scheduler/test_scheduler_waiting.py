"""Why requests wait, and where they stand in their pool's queue."""

from __future__ import annotations

import pytest

from services.scheduler.domain.model import Agent, AllocationRequest, ResourcePool
from services.scheduler.domain.schedule import schedule
from tests.unit.scheduler.scheduler_builders import agent, cluster, pending, pool, running, waiting


@pytest.mark.parametrize(
    ("pools", "agents", "requests", "expected"),
    [
        pytest.param(
            [pool()],
            [agent("a1", 4)],
            [pending("x", 2, pool_name="gpu")],
            "resource pool 'gpu' does not exist",
            id="missing-pool",
        ),
        pytest.param(
            [pool("gpu")],
            [agent("a1", 2, pool_name="gpu")],
            [pending("x", 4, pool_name="gpu")],
            "pool 'gpu' has 2 slots in all; request needs 4",
            id="larger-than-pool",
        ),
        pytest.param(
            [pool("gpu")],
            [agent("a1", 2, pool_name="gpu"), agent("a2", 2, pool_name="gpu", enabled=False)],
            [pending("x", 4, pool_name="gpu")],
            "pool 'gpu' has 2 slots in all; request needs 4 (agent 'a2' is disabled)",
            id="larger-than-pool-with-disabled-agent",
        ),
        pytest.param(
            [pool()],
            [agent("a1", 4)],
            [running("r", {"a1": ["0", "1"]}), pending("x", 4)],
            "needs 4 slots; the largest free block in pool 'default' is 2 slots on agent 'a1'",
            id="largest-free-block",
        ),
        pytest.param(
            [pool()],
            [agent("a1", 4), agent("a2", 4)],
            [running("r", {"a1": ["0", "1", "2", "3"], "a2": ["0", "1", "2", "3"]}), pending("x", 1)],
            "needs 1 slot; no agent in pool 'default' has a free slot",
            id="nothing-free",
        ),
        pytest.param(
            [pool()],
            [agent("a1", 4), agent("a2", 4)],
            [pending("x", 6)],
            "needs 6 slots: more than any agent in pool 'default' has (4), and a multi-agent fit takes "
            "every slot of agents of one size, so it needs a multiple of an agent's slot count",
            id="not-a-multiple",
        ),
        pytest.param(
            [pool()],
            [agent("a1", 4, draining=True), agent("a2", 2), agent("a3", 2, disabled_slots=["1"])],
            [pending("x", 2, single_agent=True), running("r", {"a2": ["0"]})],
            "needs 2 slots; the largest free block in pool 'default' is 1 slot on agent 'a2' "
            "(agent 'a1' is draining; agent 'a3' has 1 disabled slot)",
            id="notes-for-draining-and-disabled-slots",
        ),
        pytest.param(
            [pool()],
            [],
            [pending("x", 1)],
            "pool 'default' has no agents",
            id="no-agents",
        ),
        pytest.param(
            [pool()],
            [agent(f"a{i}", 1, enabled=False) for i in range(5)],
            [pending("x", 1)],
            "pool 'default' has 0 slots in all; request needs 1 (agent 'a0' is disabled; agent 'a1' is "
            "disabled; agent 'a2' is disabled; 2 more agents cannot take work)",
            id="many-unusable-agents-summarized",
        ),
    ],
)
def test_reasons(
    pools: list[ResourcePool], agents: list[Agent], requests: list[AllocationRequest], expected: str
) -> None:
    decision = schedule(cluster(agents, requests, pools))
    assert waiting(decision)["x"] == (expected, 0)


def test_queue_positions_count_only_requests_still_waiting_in_the_same_pool() -> None:
    pools = [pool("a"), pool("b")]
    agents = [agent("a1", 2, pool_name="a"), agent("b1", 1, pool_name="b")]
    requests = [
        pending("a-starts", 2, pool_name="a", priority=1),
        pending("a-low-old", 2, pool_name="a", priority=60, submitted=1),
        pending("a-high-new", 2, pool_name="a", priority=30, submitted=9),
        pending("a-low-new", 2, pool_name="a", priority=60, submitted=2),
        pending("b-starts", 1, pool_name="b"),
        pending("b-waits", 1, pool_name="b"),
    ]
    decision = schedule(cluster(agents, requests, pools))
    positions = {w.allocation_id: w.queue_position for w in decision.waiting}
    assert positions == {"a-high-new": 0, "a-low-old": 1, "a-low-new": 2, "b-waits": 0}
    # Waiting entries come in queue order, pool by pool.
    assert [w.allocation_id for w in decision.waiting] == ["a-high-new", "a-low-old", "a-low-new", "b-waits"]


def test_every_pending_request_either_starts_or_waits() -> None:
    requests = [pending(f"r{i}", i % 3, priority=10 * (i % 4), submitted=i) for i in range(12)]
    decision = schedule(cluster([agent("a1", 4), agent("a2", 2, draining=True)], requests))
    answered = [a.allocation_id for a in decision.assignments] + [w.allocation_id for w in decision.waiting]
    assert sorted(answered) == sorted(r.allocation_id for r in requests)


def test_running_requests_get_no_entry() -> None:
    decision = schedule(cluster([agent("a1", 2)], [running("r", {"a1": ["0"]})]))
    assert decision.waiting == () and decision.assignments == ()
