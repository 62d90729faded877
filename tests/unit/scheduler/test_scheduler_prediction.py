"""The start forecast (services/scheduler/domain/prediction.py): the scheduler's decisions played
forward over expected run times."""

from __future__ import annotations

import math

import pytest
from hypothesis import given

from services.scheduler.domain.errors import InvalidScheduleInput
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
from services.scheduler.domain.prediction import PlayClock, predict_starts
from services.scheduler.domain.schedule import schedule
from tests.unit.scheduler.test_scheduler_properties import PROPERTY_SETTINGS, clusters


def _running(rid: str, slot: str, agent: str = "a0", **extra: object) -> AllocationRequest:
    return AllocationRequest(
        allocation_id=rid,
        resource_pool="p",
        slots_needed=1,
        placements=(Placement(agent, (slot,)),),
        **extra,  # type: ignore[arg-type]
    )


def _waiting(rid: str, slots: int = 1, submitted: int = 0, **extra: object) -> AllocationRequest:
    return AllocationRequest(
        allocation_id=rid,
        resource_pool="p",
        slots_needed=slots,
        job_submitted_at_ns=submitted,
        **extra,  # type: ignore[arg-type]
    )


def test_each_waiting_request_starts_when_the_work_before_it_ends() -> None:
    agent = Agent("a0", "p", slots=(Slot("0", allocation_id="r1"), Slot("1", allocation_id="r2")))
    state = ClusterState(
        (ResourcePool("p"),),
        (agent,),
        (
            _running("r1", "0"),
            _running("r2", "1"),
            _waiting("q1", submitted=1),
            _waiting("q2", submitted=2),
            _waiting("q3", slots=2, submitted=3, single_agent=True),
        ),
    )
    expected = {"r1": 10.0, "r2": 30.0, "q1": 5.0}  # q2 runs for an unknown time
    forecast = predict_starts(state, expected, horizon_s=3600, max_steps=100)
    assert forecast.starts == {"q1": (10.0, "r1"), "q2": (15.0, "q1")}
    assert not forecast.truncated  # q3 needs both slots; q2 never ends: no forecast, not truncated


def test_a_fair_share_forecast_counts_reclaimed_slots() -> None:
    pool = ResourcePool("p", scheduler_type=SchedulerType.FAIR_SHARE)
    agent = Agent("a0", "p", slots=(Slot("0", allocation_id="a1"), Slot("1", allocation_id="a2")))
    state = ClusterState(
        (pool,),
        (agent,),
        (
            _running("a1", "0", workspace="A", user="A/u", preemptible=True, started_at_ns=1),
            _running("a2", "1", workspace="A", user="A/u", preemptible=True, started_at_ns=2),
            _waiting("b1", workspace="B", user="B/u"),
        ),
    )
    forecast = predict_starts(state, {"a1": 100.0, "a2": 100.0}, horizon_s=3600, max_steps=50)
    # B's share is reclaimed at once: it starts now, not when A's work ends, in the room made by
    # preempting A's oldest placement.
    assert forecast.starts == {"b1": (0.0, "a1")}
    # Where preempted work takes 3 s to checkpoint and give its slots back, B starts then.
    slow = predict_starts(state, {"a1": 100.0, "a2": 100.0}, 3600, 50, clock=PlayClock(release_s={"p": 3.0}))
    assert slow.starts == {"b1": (3.0, "a1")}


NOW_NS = 1_800_000_000 * 1_000_000_000
S = 1_000_000_000


def _fair_pool(**extra: object) -> ResourcePool:
    return ResourcePool("p", scheduler_type=SchedulerType.FAIR_SHARE, **extra)  # type: ignore[arg-type]


def test_work_too_young_to_reclaim_now_is_reclaimed_once_old_enough() -> None:
    # A's two trials started 2 s ago; the pool leaves work alone for its first 10 s. B's share is
    # reclaimed when A's oldest turns 10 s old (in 8 s), not when A's work ends (in 100 s).
    pool = _fair_pool(protect_started_after_ns=NOW_NS - 10 * S)
    agent = Agent("a0", "p", slots=(Slot("0", allocation_id="a1"), Slot("1", allocation_id="a2")))
    young = {"workspace": "A", "user": "A/u", "preemptible": True}
    state = ClusterState(
        (pool,),
        (agent,),
        (
            _running("a1", "0", started_at_ns=NOW_NS - 2 * S, **young),
            _running("a2", "1", started_at_ns=NOW_NS - 1 * S, **young),
            _waiting("b1", workspace="B", user="B/u"),
        ),
    )
    expected = {"a1": 100.0, "a2": 100.0, "b1": 5.0}
    forecast = predict_starts(state, expected, horizon_s=3600, max_steps=50, clock=PlayClock(now_ns=NOW_NS))
    (at, after) = forecast.starts["b1"]
    assert at == pytest.approx(8.0, abs=0.01) and after == "a1"
    # Without the clock the protection never moves: B waits for A's work to end.
    frozen = predict_starts(state, expected, horizon_s=3600, max_steps=50)
    assert frozen.starts["b1"] == (100.0, "a1")


def test_work_the_play_places_is_reclaimed_too_once_old_enough() -> None:
    # One slot. B's trial runs 30 s from now; A waits for it... then A's share (equal weights) is
    # reclaimed from B's second trial, which the play placed: 10 s after it started, not at its end.
    pool = _fair_pool(protect_started_after_ns=NOW_NS - 10 * S)
    agent = Agent("a0", "p", slots=(Slot("0", allocation_id="b1"),))
    state = ClusterState(
        (pool,),
        (agent,),
        (
            _running("b1", "0", started_at_ns=NOW_NS - 1 * S, workspace="B", user="B/u", preemptible=True),
            _waiting("a1", submitted=2, workspace="A", user="A/u"),
        ),
    )
    forecast = predict_starts(state, {"b1": 100.0, "a1": 5.0}, 3600, 50, clock=PlayClock(now_ns=NOW_NS))
    # b1 was placed a second ago: reclaimable at 9 s.
    assert forecast.starts["a1"][0] == pytest.approx(9.0, abs=0.01)


def test_shares_drift_with_the_usage_the_play_accrues() -> None:
    # Two slots, equal weights. B used a lot lately and A nothing: B's share is nothing while A
    # wants both slots. As A holds them, A's usage grows and B's decays, until B's share is a
    # slot and one of A's (long) trials is reclaimed for it.
    pool = _fair_pool(
        workspaces=(ShareGroup("A", recent_slot_seconds=0.0), ShareGroup("B", recent_slot_seconds=5_000.0)),
    )
    agent = Agent("a0", "p", slots=(Slot("0", allocation_id="a1"), Slot("1", allocation_id="a2")))
    work = {"workspace": "A", "user": "A/u", "preemptible": True}
    state = ClusterState(
        (pool,),
        (agent,),
        (
            _running("a1", "0", started_at_ns=NOW_NS - 100 * S, **work),
            _running("a2", "1", started_at_ns=NOW_NS - 50 * S, **work),
            _waiting("a3", submitted=1, **work),
            _waiting("b1", submitted=2, workspace="B", user="B/u"),
        ),
    )
    expected = {"a1": 3000.0, "a2": 3000.0, "a3": 10.0, "b1": 10.0}
    assert not schedule(state).preemptions  # B's share is nothing now
    drifting = predict_starts(
        state, expected, 86_400, 500, clock=PlayClock(now_ns=NOW_NS, usage_half_life_s={"p": 600.0})
    )
    assert 0 < drifting.starts["b1"][0] < 3000.0
    # Usage standing still (no half-life given): B waits for A's work to end.
    still = predict_starts(state, expected, 86_400, 500, clock=PlayClock(now_ns=NOW_NS))
    assert still.starts["b1"][0] >= 3000.0


def test_a_preempted_run_costs_its_restart_when_it_runs_again() -> None:
    # Two slots, equal weights: B reclaims A's oldest trial at once (a1, 50 s left); B's trial ends
    # at 10 s and a1 runs again: 50 s more plus a 5 s restart. a3 starts when a2 ends (50 s), a4
    # when a1 does (65 s; 60 s with a free restart).
    agent = Agent("a0", "p", slots=(Slot("0", allocation_id="a1"), Slot("1", allocation_id="a2")))
    work = {"workspace": "A", "user": "A/u", "preemptible": True}
    state = ClusterState(
        (_fair_pool(),),
        (agent,),
        (
            _running("a1", "0", started_at_ns=1, requested_at_ns=1, **work),
            _running("a2", "1", started_at_ns=2, requested_at_ns=2, **work),
            _waiting("a3", **work, requested_at_ns=3),
            _waiting("a4", **work, requested_at_ns=4),
            _waiting("b1", workspace="B", user="B/u"),
        ),
    )
    expected = {"a1": 50.0, "a2": 50.0, "a3": 100.0, "a4": 100.0, "b1": 10.0}
    costly = predict_starts(state, expected, 3600, 100, restart_seconds={"a1": 5.0})
    assert costly.starts["b1"] == (0.0, "a1")
    assert costly.starts["a3"] == (50.0, "a2") and costly.starts["a4"] == (65.0, "a1")
    free = predict_starts(state, expected, 3600, 100)
    assert free.starts["a4"] == (60.0, "a1")


def test_bounds_are_refused_and_a_short_play_says_it_was_cut() -> None:
    state = ClusterState((ResourcePool("p"),), (), (_waiting("q"),))
    with pytest.raises(InvalidScheduleInput, match="horizon_seconds"):
        predict_starts(state, {}, horizon_s=0, max_steps=10)
    with pytest.raises(InvalidScheduleInput, match="horizon_seconds"):
        predict_starts(state, {}, horizon_s=math.inf, max_steps=10)
    with pytest.raises(InvalidScheduleInput, match="max_steps"):
        predict_starts(state, {}, horizon_s=60, max_steps=100_000)
    with pytest.raises(InvalidScheduleInput, match="usage_half_life_seconds"):
        predict_starts(state, {}, 60, 10, clock=PlayClock(usage_half_life_s={"p": math.nan}))
    with pytest.raises(InvalidScheduleInput, match="release_seconds"):
        predict_starts(state, {}, 60, 10, clock=PlayClock(release_s={"p": -1.0}))
    with pytest.raises(InvalidScheduleInput, match="now"):
        predict_starts(state, {}, 60, 10, clock=PlayClock(now_ns=-1))
    agent = Agent("a0", "p", slots=(Slot("0", allocation_id="r"),))
    many = ClusterState(
        (ResourcePool("p"),),
        (agent,),
        (_running("r", "0"), *(_waiting(f"q{i}", submitted=i) for i in range(20))),
    )
    expected = {"r": 1.0, **{f"q{i}": 1.0 for i in range(20)}}
    cut = predict_starts(many, expected, horizon_s=3600, max_steps=5)
    assert cut.truncated and 0 < len(cut.starts) < 20
    whole = predict_starts(many, expected, horizon_s=3600, max_steps=1000)
    assert not whole.truncated and whole.starts["q19"] == (20.0, "q18")


def test_once_every_job_has_a_start_the_play_goes_only_to_the_job_horizon() -> None:
    # One slot; K's one-second request queues behind r, and job J's twenty behind it.
    agent = Agent("a0", "p", slots=(Slot("0", allocation_id="r"),))
    state = ClusterState(
        (ResourcePool("p"),),
        (agent,),
        (
            _running("r", "0"),
            _waiting("k", submitted=1, job_id="K"),
            *(_waiting(f"j{i}", submitted=2, requested_at_ns=i, job_id="J") for i in range(20)),
        ),
    )
    expected = {"r": 1.0, "k": 1.0, **{f"j{i}": 1.0 for i in range(20)}}
    short = predict_starts(state, expected, 3600, 1000, job_horizon_s=5.0)
    # Every job has its first start by 2 s; J's later ones are forecast up to 5 s only.
    assert short.starts == {
        "k": (1.0, "r"),
        **{f"j{i}": (2.0 + i, "k" if i == 0 else f"j{i - 1}") for i in range(4)},
    }
    assert not short.truncated
    # A job whose first start lies beyond the job horizon is still forecast.
    late = predict_starts(state, expected, 3600, 1000, job_horizon_s=0.5)
    assert late.starts == {"k": (1.0, "r"), "j0": (2.0, "k")}
    with pytest.raises(InvalidScheduleInput, match="job_horizon_seconds"):
        predict_starts(state, expected, 3600, 10, job_horizon_s=-1.0)


@PROPERTY_SETTINGS
@given(clusters())
def test_what_starts_now_in_the_forecast_is_what_the_scheduler_starts_now(state: ClusterState) -> None:
    forecast = predict_starts(state, {}, horizon_s=60, max_steps=50)
    now = {rid for rid, (at, _) in forecast.starts.items() if at == 0.0}
    assert {a.allocation_id for a in schedule(state).assignments} <= now
    waiting = {r.allocation_id for r in state.requests if not r.running}
    assert set(forecast.starts) <= waiting
