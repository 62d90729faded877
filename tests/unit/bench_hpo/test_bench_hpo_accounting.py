"""Budget accounting of the search-quality benchmark, on small hand-computed examples."""

from __future__ import annotations

import math

from bench.hpo.accounting import (
    CurvePoint,
    EpochReport,
    best_at_budget,
    best_so_far,
    consumed_budget,
    epochs_for,
    time_to_target,
)
from bench.hpo.record import RunRecord

# Two workers, max_epochs 3: trial a trains 3 epochs, b 1 epoch (stopped), c 2 epochs.
# In measured order: a1 .50, b1 .60, a2 .40, c1 .45, a3 .42, c2 .30
REPORTS = [
    EpochReport("c", 2, 0.30, 106.0),
    EpochReport("a", 1, 0.50, 100.0),
    EpochReport("b", 1, 0.60, 101.0),
    EpochReport("a", 2, 0.40, 102.0),
    EpochReport("c", 1, 0.45, 103.0),
    EpochReport("a", 3, 0.42, 104.0),
]
MAX_EPOCHS = 3


def test_curve_orders_by_measurement_time_and_keeps_the_best() -> None:
    curve = best_so_far(REPORTS)
    assert curve == [
        CurvePoint(1, 0.50),
        CurvePoint(2, 0.50),
        CurvePoint(3, 0.40),
        CurvePoint(4, 0.40),
        CurvePoint(5, 0.40),
        CurvePoint(6, 0.30),
    ]
    assert consumed_budget(curve, MAX_EPOCHS) == 2.0


def test_same_time_reports_tie_break_on_trial_then_epoch() -> None:
    curve = best_so_far([EpochReport("b", 1, 0.2, 5.0), EpochReport("a", 1, 0.3, 5.0)])
    assert curve == [CurvePoint(1, 0.3), CurvePoint(2, 0.2)]


def test_time_to_target_is_the_first_budget_at_or_below_the_target() -> None:
    curve = best_so_far(REPORTS)
    # .40 first at the 3rd epoch: 3 / 3 = 1 full training; .30 at the 6th: 2.
    assert time_to_target(curve, 0.40, MAX_EPOCHS) == 1.0
    assert time_to_target(curve, 0.35, MAX_EPOCHS) == 2.0
    assert time_to_target(curve, 0.50, MAX_EPOCHS) == 1 / 3
    assert time_to_target(curve, 0.29, MAX_EPOCHS) is None
    assert time_to_target([], 0.5, MAX_EPOCHS) is None


def test_best_at_budget_is_the_curve_value_once_the_budget_is_spent() -> None:
    curve = best_so_far(REPORTS)
    assert best_at_budget(curve, 1.0, MAX_EPOCHS) == 0.40  # after 3 epochs
    assert best_at_budget(curve, 1.5, MAX_EPOCHS) == 0.40  # 4.5 epochs allow 4
    assert best_at_budget(curve, 2.0, MAX_EPOCHS) == 0.30
    # Less than one epoch's worth: nothing measured yet.
    assert best_at_budget(curve, 0.2, MAX_EPOCHS) is None
    # The run stopped before spending that much: unknown, not its last value.
    assert best_at_budget(curve, 2.5, MAX_EPOCHS) is None


def test_budgets_convert_to_whole_epochs_without_float_noise() -> None:
    assert epochs_for(20.0, 27) == 540
    assert epochs_for(0.1 * 3, 10) == 3  # 0.30000000000000004 * 10
    assert epochs_for(1 / 3, 3) == 1


def test_diverged_reports_never_improve_the_curve() -> None:
    curve = best_so_far([EpochReport("a", 1, math.nan, 1.0), EpochReport("a", 2, 0.7, 2.0)])
    assert curve[0].best_error == math.inf
    assert curve[1].best_error == 0.7


def test_records_round_trip_through_json() -> None:
    record = RunRecord(
        system="cairn_random",
        seed=3,
        budget=2.0,
        max_epochs=MAX_EPOCHS,
        wall_s=12.34,
        trials=3,
        ended_by="budget",
        reports=REPORTS,
        settings={"searcher": "random"},
    )
    again = RunRecord.from_json(record.to_json())
    assert (again.system, again.seed, again.budget, again.trials, again.wall_s) == (
        "cairn_random",
        3,
        2.0,
        3,
        12.3,
    )
    # Times are stored relative to the first report; the curve does not change.
    assert again.reports[0] == EpochReport("a", 1, 0.50, 0.0)
    assert best_so_far(again.reports) == best_so_far(REPORTS)
