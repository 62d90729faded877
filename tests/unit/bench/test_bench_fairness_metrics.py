"""bench/fairness_metrics.py: the fairness figures from runs and bursts, on timelines small enough
to work out by hand."""

from __future__ import annotations

import math

import pytest

from bench.fairness_metrics import (
    Burst,
    ForecastSample,
    Run,
    figures,
    forecast_errors,
    jain_index,
    lost_since_checkpoint,
    quantile,
    water_fill,
)


def test_jain_index_is_one_when_equal_and_one_over_n_when_one_has_everything() -> None:
    assert jain_index([0.7, 0.7, 0.7]) == pytest.approx(1.0)
    assert jain_index([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain_index([1.0, 0.5]) == pytest.approx(1.5**2 / (2 * 1.25))
    assert math.isnan(jain_index([]))


def test_water_fill_shares_by_weight_and_gives_what_one_does_not_want_to_the_others() -> None:
    weights = {"a": 1.0, "b": 1.0, "c": 2.0}
    assert water_fill(64, {"a": 100, "b": 100, "c": 100}, weights) == pytest.approx(
        {"a": 16, "b": 16, "c": 32}
    )
    # a wants only 4: the other 60 go 1:2.
    assert water_fill(64, {"a": 4, "b": 100, "c": 100}, weights) == pytest.approx({"a": 4, "b": 20, "c": 40})
    # Less demand than slots: everyone gets what it wants; no demand, nothing.
    assert water_fill(64, {"a": 4, "b": 0, "c": 10}, weights) == pytest.approx({"a": 4, "b": 0, "c": 10})


def test_quantile_interpolates_and_counts_never_as_largest() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5) == 3.0
    assert quantile([0.0, 10.0], 0.95) == pytest.approx(9.5)
    assert quantile([1.0, 2.0, float("inf")], 0.95) == float("inf")
    assert quantile([1.0, 2.0, float("inf")], 0.5) == 2.0


def test_lost_work_is_what_was_trained_since_the_last_checkpoint() -> None:
    assert lost_since_checkpoint(9.0, 4.0) == pytest.approx(1.0)
    assert lost_since_checkpoint(8.0, 4.0) == pytest.approx(0.0)
    assert lost_since_checkpoint(3.0, 4.0) == pytest.approx(3.0)


def test_shares_against_entitlement_while_backlogged_and_time_to_entitlement() -> None:
    # A pool of 4 slots, workspaces a and b weighted 1:1. a wants 8 one-slot trials from 0 s and
    # takes all 4 slots for 10 s; b wants 4 from 5 s, gets 2 slots at 10 s (a keeps 2).
    bursts = [Burst("a", 1, 0.0, 8, 1), Burst("b", 2, 5.0, 4, 1)]
    runs = [Run("a", 1, t, 1, 0.0, 10.0, completed=True) for t in range(4)]
    runs += [Run("a", 1, 10 + t, 1, 10.0, 30.0, completed=False) for t in range(2)]
    runs += [Run("b", 2, 20 + t, 1, 10.0, 30.0, completed=False) for t in range(2)]
    result = figures(runs, bursts, {"a": 1.0, "b": 1.0}, capacity=4, window_s=20.0)
    a, b = result.workspaces["a"], result.workspaces["b"]
    # a: backlogged all 20 s; entitled 4 slots for 5 s, then 2 (b wants too); held 4 for 10 s, 2.
    assert a.backlogged_s == pytest.approx(20.0)
    assert a.share_ratio == pytest.approx((4 * 10 + 2 * 10) / (4 * 5 + 2 * 15))
    # b: backlogged from 5 s, entitled 2, held 0 for 5 s then 2.
    assert b.share_ratio == pytest.approx((2 * 10) / (2 * 15))
    assert result.jain == pytest.approx(jain_index([a.share_ratio, b.share_ratio]))
    assert a.to_entitlement_s == [0.0] and b.to_entitlement_s == [5.0]
    # Every slot busy whenever anything waited, which was always; nothing preempted.
    assert result.utilization_while_waiting == pytest.approx(1.0)
    assert result.preemptions == 0 and result.lost_slot_seconds == 0.0


def test_idle_slots_while_waiting_and_preempted_work_and_a_burst_never_served() -> None:
    # 4 slots; a's 2 trials of 4 slots each. The first runs 0-6 s, is preempted having lost 2 s of
    # 4 slots, and nothing runs after (the second never starts): the pool idles while a waits.
    bursts = [Burst("a", 1, 0.0, 2, 4)]
    runs = [Run("a", 1, 1, 4, 0.0, 6.0, completed=False, preempted=True, lost_slot_seconds=8.0)]
    result = figures(runs, bursts, {"a": 1.0}, capacity=4, window_s=12.0)
    assert result.utilization_while_waiting == pytest.approx(0.5)
    assert result.preemptions == 1 and result.lost_slot_seconds == pytest.approx(8.0)
    # Entitled to 4 slots at once (a four-slot gang's slack is 3: target 1 slot): held at 0 s.
    assert result.workspaces["a"].to_entitlement_s == [0.0]
    late = figures([], [Burst("a", 1, 1.0, 1, 1)], {"a": 1.0}, capacity=4, window_s=12.0)
    assert late.workspaces["a"].to_entitlement_s == [float("inf")] and late.never_entitled == 1


def test_forecast_errors_are_parts_of_the_wait_against_the_next_start() -> None:
    runs = [Run("a", 1, 1, 1, 10.0, 20.0, completed=True), Run("a", 1, 2, 1, 30.0, 40.0, completed=True)]
    samples = [
        ForecastSample(asked=0.0, experiment_id=1, predicted=12.0),  # started at 10: off by 2 of 10
        ForecastSample(asked=20.0, experiment_id=1, predicted=30.0),  # exact
        ForecastSample(asked=29.5, experiment_id=1, predicted=35.0),  # waited under a second: left out
        ForecastSample(asked=0.0, experiment_id=2, predicted=5.0),  # never started: left out
    ]
    errors = forecast_errors(samples, runs)
    assert [e.relative for e in errors] == pytest.approx([0.2, 0.0])
    assert [e.absolute_s for e in errors] == pytest.approx([2.0, 0.0])
    assert [e.wait for e in errors] == pytest.approx([10.0, 10.0])


def test_a_forecast_speaks_from_when_it_was_made_or_when_it_was_read_if_older() -> None:
    runs = [Run("a", 1, 1, 1, 10.0, 20.0, completed=True), Run("a", 1, 2, 1, 30.0, 40.0, completed=True)]
    # Made at 9 (after the listing was asked for at 8.5), it said 10: right, over a wait of 1 s.
    fresh = ForecastSample(asked=8.5, experiment_id=1, predicted=10.0, made=9.0)
    # Made at 5 and shown at 12, it still says 10, which has passed: the next start is 30's.
    stale = ForecastSample(asked=12.0, experiment_id=1, predicted=10.0, made=5.0)
    assert fresh.origin == 9.0 and stale.origin == 12.0
    first, second = forecast_errors([fresh, stale], runs)
    assert (first.actual, first.wait, first.relative) == pytest.approx((10.0, 1.0, 0.0))
    assert (second.actual, second.wait, second.relative) == pytest.approx((30.0, 18.0, 20.0 / 18.0))
