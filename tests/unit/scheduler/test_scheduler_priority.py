"""Priority order, first-come-first-served ties, and Determined's backfilling rule."""

from __future__ import annotations

import pytest

from services.scheduler.domain.model import AllocationRequest, ResourcePool
from services.scheduler.domain.schedule import schedule
from tests.unit.scheduler.scheduler_builders import agent, cluster, pending, pool, started_ids, waiting


@pytest.mark.parametrize(
    ("requests", "expected_started"),
    [
        pytest.param(
            [pending("low", 4, priority=50), pending("high", 4, priority=10)],
            ["high"],
            id="smaller-number-first",
        ),
        pytest.param(
            [pending("late", 4, submitted=20), pending("early", 4, submitted=10)],
            ["early"],
            id="older-job-first",
        ),
        pytest.param(
            [pending("b", 4, submitted=5, requested=2), pending("a", 4, submitted=5, requested=1)],
            ["a"],
            id="same-job-time-older-request-first",
        ),
        pytest.param(
            [pending("zeta", 4, submitted=5, requested=5), pending("alpha", 4, submitted=5, requested=5)],
            ["alpha"],
            id="full-tie-broken-by-allocation-id",
        ),
        pytest.param(
            [
                pending("new-job", 4, submitted=1, requested=99),
                pending("old-req", 4, submitted=2, requested=0),
            ],
            ["new-job"],
            id="job-time-before-request-time",
        ),
        pytest.param(
            [pending("explicit", 4, priority=42, submitted=2), pending("default", 4, submitted=1)],
            ["default"],
            id="zero-means-default-42",
        ),
    ],
)
def test_queue_order_decides_who_gets_the_only_agent(
    requests: list[AllocationRequest], expected_started: list[str]
) -> None:
    decision = schedule(cluster([agent("a1", 4)], requests))
    assert started_ids(decision) == expected_started


def test_pool_default_priority_applies_to_requests_without_one() -> None:
    # Pool default 5 beats an explicit 10; in a pool with Determined's default (42) it would not.
    requests = [pending("explicit-10", 4, priority=10), pending("no-priority", 4, submitted=9)]
    in_pool_5 = schedule(cluster([agent("a1", 4)], requests, [pool(default_priority=5)]))
    in_pool_42 = schedule(cluster([agent("a1", 4)], requests, [pool()]))
    assert started_ids(in_pool_5) == ["no-priority"]
    assert started_ids(in_pool_42) == ["explicit-10"]


def test_within_a_level_a_later_request_starts_when_an_earlier_one_does_not_fit() -> None:
    requests = [pending("big", 8, submitted=1), pending("small", 2, submitted=2)]
    decision = schedule(cluster([agent("a1", 4)], requests))
    assert started_ids(decision) == ["small"]
    assert "big" in waiting(decision)


def test_fits_are_applied_in_queue_order_within_a_pass() -> None:
    requests = [pending(f"r{i}", 2, submitted=i) for i in range(4)]
    decision = schedule(cluster([agent("a1", 4), agent("a2", 2)], requests))
    assert started_ids(decision) == ["r0", "r1", "r2"]
    assert waiting(decision)["r3"][1] == 0


@pytest.mark.parametrize(
    ("pool_config", "low", "expected_started"),
    [
        # Determined: with preemption disabled nothing of a lower priority starts while a
        # higher-priority request is blocked.
        pytest.param(pool(), pending("low", 2, priority=50), [], id="preemption-off-holds-everything"),
        pytest.param(
            pool(),
            pending("low", 2, priority=50, preemptible=True),
            [],
            id="preemption-off-holds-preemptible-too",
        ),
        # With preemption enabled, only preemptible work backfills: it can be taken back later.
        pytest.param(
            pool(preemption=True),
            pending("low", 2, priority=50, preemptible=True),
            ["low"],
            id="preemption-on-backfills-preemptible",
        ),
        pytest.param(
            pool(preemption=True),
            pending("low", 2, priority=50, preemptible=False),
            [],
            id="preemption-on-holds-non-preemptible",
        ),
    ],
)
def test_backfilling_behind_a_blocked_higher_priority_request(
    pool_config: ResourcePool, low: AllocationRequest, expected_started: list[str]
) -> None:
    requests = [pending("blocked", 8, priority=10), low]
    decision = schedule(cluster([agent("a1", 4)], requests, [pool_config]))
    assert started_ids(decision) == expected_started
    if not expected_started:
        reason, _ = waiting(decision)["low"]
        assert reason.startswith("waiting behind higher-priority work ('blocked' at priority 10")


def test_lower_level_starts_when_every_higher_request_was_placed() -> None:
    requests = [pending("high", 2, priority=10), pending("low", 2, priority=50)]
    decision = schedule(cluster([agent("a1", 4)], requests))
    assert started_ids(decision) == ["high", "low"]


def test_held_request_keeps_its_place_in_the_working_copy() -> None:
    # Determined applies a fit before deciding whether the level may start: a held non-preemptible
    # request reserves its slots, so a lower preemptible one cannot take them.
    requests = [
        pending("blocked", 8, priority=10),
        pending("held", 4, priority=20, preemptible=False),
        pending("backfill", 4, priority=30, preemptible=True),
    ]
    decision = schedule(cluster([agent("a1", 4)], requests, [pool(preemption=True)]))
    assert started_ids(decision) == []
    assert waiting(decision)["held"][0].endswith("only preemptible work may start ahead of it")
    assert waiting(decision)["backfill"][0].startswith("needs 4 slots; no agent in pool 'default'")


def test_pools_are_scheduled_independently() -> None:
    pools = [pool("cpu"), pool("gpu", preemption=True)]
    agents = [agent("c1", 2, pool_name="cpu"), agent("g1", 4, pool_name="gpu")]
    requests = [
        pending("gpu-big", 8, pool_name="gpu", priority=1),
        pending("cpu-low", 2, pool_name="cpu", priority=99),
        pending("gpu-low", 4, pool_name="gpu", priority=99, preemptible=True),
    ]
    decision = schedule(cluster(agents, requests, pools))
    assert sorted(started_ids(decision)) == ["cpu-low", "gpu-low"]


def test_zero_slot_and_slotted_requests_do_not_block_each_other() -> None:
    requests = [pending("blocked", 8, priority=1), pending("tensorboard", 0, priority=99)]
    decision = schedule(cluster([agent("a1", 4)], requests))
    assert started_ids(decision) == ["tensorboard"]


def test_missing_pool_default_priority_is_determined_default() -> None:
    decision = schedule(
        cluster([agent("a1", 4)], [pending("x", 1, pool_name="nope")], [ResourcePool("default")])
    )
    assert waiting(decision) == {"x": ("resource pool 'nope' does not exist", 0)}
