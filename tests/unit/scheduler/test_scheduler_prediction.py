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
    Slot,
)
from services.scheduler.domain.prediction import predict_starts
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
    # B's share is reclaimed at once: it starts now, not when A's work ends.
    assert forecast.starts == {"b1": (0.0, "")}


def test_bounds_are_refused_and_a_short_play_says_it_was_cut() -> None:
    state = ClusterState((ResourcePool("p"),), (), (_waiting("q"),))
    with pytest.raises(InvalidScheduleInput, match="horizon_seconds"):
        predict_starts(state, {}, horizon_s=0, max_steps=10)
    with pytest.raises(InvalidScheduleInput, match="horizon_seconds"):
        predict_starts(state, {}, horizon_s=math.inf, max_steps=10)
    with pytest.raises(InvalidScheduleInput, match="max_steps"):
        predict_starts(state, {}, horizon_s=60, max_steps=100_000)
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


@PROPERTY_SETTINGS
@given(clusters())
def test_what_starts_now_in_the_forecast_is_what_the_scheduler_starts_now(state: ClusterState) -> None:
    forecast = predict_starts(state, {}, horizon_s=60, max_steps=50)
    now = {rid for rid, (at, _) in forecast.starts.items() if at == 0.0}
    assert {a.allocation_id for a in schedule(state).assignments} <= now
    waiting = {r.allocation_id for r in state.requests if not r.running}
    assert set(forecast.starts) <= waiting
