"""Preemption: who is taken back for whom, and when nothing is."""

from __future__ import annotations

import pytest

from services.scheduler.domain.model import AllocationRequest
from services.scheduler.domain.schedule import schedule
from tests.unit.scheduler.scheduler_builders import (
    agent,
    cluster,
    pending,
    pool,
    preempted,
    running,
    started_ids,
    waiting,
)

PREEMPTING = pool(preemption=True)


def test_high_priority_request_preempts_lower_priority_work_and_waits() -> None:
    state = cluster(
        [agent("a1", 4)],
        [running("low", {"a1": ["0", "1", "2", "3"]}, priority=50), pending("high", 4, priority=10)],
        [PREEMPTING],
    )
    decision = schedule(state)
    assert preempted(decision) == {"low": "high"}
    assert started_ids(decision) == []  # it starts once "low" has released its slots
    assert waiting(decision)["high"] == (
        "preempting 1 lower-priority allocation to make room; starts once they release their slots",
        0,
    )


def test_no_preemption_when_the_pool_disables_it() -> None:
    state = cluster(
        [agent("a1", 4)],
        [running("low", {"a1": ["0", "1", "2", "3"]}, priority=50), pending("high", 4, priority=10)],
        [pool(preemption=False)],
    )
    decision = schedule(state)
    assert decision.preemptions == ()
    assert waiting(decision)["high"][0] == "needs 4 slots; no agent in pool 'default' has a free slot"


def test_non_preemptible_work_is_never_preempted() -> None:
    state = cluster(
        [agent("a1", 4)],
        [
            running("keep", {"a1": ["0", "1"]}, priority=50, preemptible=False),
            running("take", {"a1": ["2", "3"]}, priority=50),
            pending("high", 4, priority=10),
        ],
        [PREEMPTING],
    )
    decision = schedule(state)
    # Taking "take" alone does not make room for 4 slots, and "keep" is off limits: preempt nothing.
    assert decision.preemptions == ()


def test_victims_come_from_the_lowest_priority_and_the_back_of_the_queue_first() -> None:
    state = cluster(
        [agent("a1", 2), agent("a2", 2), agent("a3", 2)],
        [
            running("p30-old", {"a1": ["0", "1"]}, priority=30, submitted=1),
            running("p30-new", {"a2": ["0", "1"]}, priority=30, submitted=2),
            running("p20", {"a3": ["0", "1"]}, priority=20, submitted=0),
            pending("high", 2, priority=10),
        ],
        [PREEMPTING],
    )
    assert preempted(schedule(state)) == {"p30-new": "high"}


def test_victims_accumulate_until_the_request_fits() -> None:
    state = cluster(
        [agent("a1", 4)],
        [
            running("p40", {"a1": ["0", "1"]}, priority=40),
            running("p50", {"a1": ["2"]}, priority=50),
            running("p60", {"a1": ["3"]}, priority=60),
            pending("high", 3, priority=10),
        ],
        [PREEMPTING],
    )
    # p60 frees 1, p50 another: 2 < 3, so p40 goes too.
    assert preempted(schedule(state)) == {"p60": "high", "p50": "high", "p40": "high"}


def test_higher_priority_work_is_never_preempted() -> None:
    state = cluster(
        [agent("a1", 4)],
        [running("important", {"a1": ["0", "1", "2", "3"]}, priority=5), pending("p10", 4, priority=10)],
        [PREEMPTING],
    )
    assert schedule(state).preemptions == ()


@pytest.mark.parametrize(
    ("victim", "expected"),
    [
        pytest.param(
            running("behind", {"a1": ["0", "1", "2", "3"]}, priority=10, submitted=20, job="j2"),
            {"behind": "req"},
            id="equal-priority-queued-behind",
        ),
        pytest.param(
            running("ahead", {"a1": ["0", "1", "2", "3"]}, priority=10, submitted=5, job="j2"),
            {},
            id="equal-priority-queued-ahead",
        ),
        pytest.param(
            running(
                "same-job", {"a1": ["0", "1", "2", "3"]}, priority=10, submitted=10, requested=9, job="j1"
            ),
            {},
            id="equal-priority-same-job",
        ),
    ],
)
def test_equal_priority_preempts_only_other_jobs_queued_behind(
    victim: AllocationRequest, expected: dict[str, str]
) -> None:
    state = cluster(
        [agent("a1", 4)],
        [victim, pending("req", 4, priority=10, submitted=10, requested=1, job="j1")],
        [PREEMPTING],
    )
    assert preempted(schedule(state)) == expected


def test_a_victim_is_chosen_once_and_later_requests_use_the_freed_room() -> None:
    state = cluster(
        [agent("a1", 4)],
        [
            running("low", {"a1": ["0", "1", "2", "3"]}, priority=50),
            pending("first", 2, priority=10, submitted=1),
            pending("second", 2, priority=10, submitted=2),
        ],
        [PREEMPTING],
    )
    decision = schedule(state)
    assert preempted(decision) == {"low": "first"}
    assert waiting(decision)["second"] == ("starts once preempted work releases its slots", 1)


def test_nothing_more_starts_once_a_preemption_is_chosen() -> None:
    state = cluster(
        [agent("a1", 4), agent("a2", 1)],
        [
            running("low", {"a1": ["0", "1", "2", "3"]}, priority=50),
            pending("high", 4, priority=10),
            pending("small", 1, priority=30, preemptible=True),
        ],
        [PREEMPTING],
    )
    decision = schedule(state)
    assert preempted(decision) == {"low": "high"}
    assert started_ids(decision) == []
    assert (
        waiting(decision)["small"][0]
        == "waiting while lower-priority work is preempted to make room for 'high'"
    )


def test_same_level_requests_placed_before_the_preemption_still_start() -> None:
    state = cluster(
        [agent("a1", 4), agent("a2", 1)],
        [
            running("low", {"a1": ["0", "1", "2", "3"]}, priority=50),
            pending("high", 4, priority=10, submitted=1),
            pending("high-small", 1, priority=10, submitted=2),
        ],
        [PREEMPTING],
    )
    decision = schedule(state)
    assert started_ids(decision) == ["high-small"]
    assert preempted(decision) == {"low": "high"}


def test_no_preemption_for_a_request_no_idle_pool_could_hold() -> None:
    state = cluster(
        [agent("a1", 4)],
        [running("low", {"a1": ["0"]}, priority=50), pending("huge", 16, priority=10)],
        [PREEMPTING],
    )
    decision = schedule(state)
    assert decision.preemptions == ()
    assert waiting(decision)["huge"][0] == "pool 'default' has 4 slots in all; request needs 16"


def test_preemption_can_make_room_for_a_multi_agent_fit() -> None:
    state = cluster(
        [agent("a1", 4), agent("a2", 4)],
        [
            running("low-a", {"a1": ["0"]}, priority=50),
            running("low-b", {"a2": ["3"]}, priority=50, submitted=1),
            pending("dist", 8, priority=10),
        ],
        [PREEMPTING],
    )
    assert preempted(schedule(state)) == {"low-b": "dist", "low-a": "dist"}


def test_zero_slot_work_is_not_preempted_for_slots() -> None:
    state = cluster(
        [agent("a1", 2)],
        [
            running("tb", {"a1": []}, slots=0, priority=99),
            running("low", {"a1": ["0", "1"]}, priority=50, preemptible=False),
            pending("high", 2, priority=10),
        ],
        [PREEMPTING],
    )
    assert schedule(state).preemptions == ()
