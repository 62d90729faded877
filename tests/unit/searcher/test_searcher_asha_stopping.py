"""Stopping ASHA (stop_once: true, Determined 0.38): decisions on scripted validations, early exits,
shutdown and progress, and Determined's own simulated searches."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.searcher_plugin.events import ExitReason, ValidationCompleted
from services.searcher.domain.preview import preview
from tests.unit.searcher.searcher_asha_builders import HalvingMaster, halving_spec
from tests.unit.searcher.searcher_builders import REGISTRY


def stopping_master(**fields: Any) -> HalvingMaster:
    # Rungs 100, 200, 400.
    defaults: dict[str, Any] = {
        "divisor": 2,
        "num_rungs": 3,
        "max_time": 400,
        "max_trials": 5,
        "max_concurrent_trials": 2,
    }
    return HalvingMaster.start(halving_spec(**{**defaults, **fields}))


def test_scripted_stopping_decisions() -> None:
    m = stopping_master()
    # Every trial is created to train to rung 0, and told the next rung when it goes on.
    assert m.answer == [("create", "T0", 100), ("create", "T1", 100)]
    # Alone in rung 0 (keep max(1, floor(1/2)) = 1): T0 goes on.
    assert m.validate("T0", 0.5, 100) == [("target", "T0", 200)]
    # Second of two in rung 0 (keep 1): stopped, and replaced.
    assert m.validate("T1", 0.7, 100) == [("stop", "T1"), ("create", "T2", 100)]
    # One validation at 250 passes rungs 0 (first of three) and 1 (first of one); 400 not reached.
    assert m.validate("T2", 0.4, 250) == [("target", "T2", 400)]
    # T0 reaches rung 1 behind T2 (keep 1 of 2).
    assert m.validate("T0", 0.45, 200) == [("stop", "T0"), ("create", "T3", 100)]
    # An equal result ranks ahead of the ones already there (Determined's insert): T3 goes on.
    assert m.validate("T3", 0.4, 100) == [("target", "T3", 200)]
    assert m.rung(0) == ["T3", "T2", "T0", "T1"]
    # The top rung stops even the best trial; the fifth and last trial replaces it.
    assert m.validate("T2", 0.3, 400) == [("stop", "T2"), ("create", "T4", 100)]
    # An errored trial ranks last at its rung; the budget is spent, so no replacement.
    assert m.exit("T4", ExitReason.ERRORED) == []
    assert m.searcher.progress() == pytest.approx(5 / 6)  # rung 0: T3 T2 T0 T1 T4 — full
    # Invalid hyperparameters: out of every rung and out of max_trials, so always replaced.
    assert m.exit("T3", ExitReason.INVALID_HP) == [("stop", "T3"), ("create", "T5", 100)]
    assert m.searcher.progress() == pytest.approx(4 / 6)
    assert m.rung(0) == ["T2", "T0", "T1", "T4"] and m.rung(1) == ["T2", "T0"] and m.rung(2) == ["T2"]
    assert m.exit_stopped() == []
    assert m.validate("T5", 0.6, 100) == [("stop", "T5")]  # third of five (keep 2); no budget left
    assert m.exit_stopped() == [("shutdown", False, False)]
    assert m.searcher.progress() == 1.0


def test_larger_is_better_negates_the_metric() -> None:
    m = stopping_master(smaller_is_better=False)
    assert m.validate("T0", 0.5, 100) == [("target", "T0", 200)]
    assert m.validate("T1", 0.7, 100) == [("target", "T1", 200)]  # better than T0: goes on
    assert m.validate("T0", 0.9, 200) == [("target", "T0", 400)]
    assert m.validate("T1", 0.1, 200) == [("stop", "T1"), ("create", "T2", 100)]


def test_time_metric_and_intermediate_validations() -> None:
    m = HalvingMaster.start(
        halving_spec(time_metric="epochs", max_time=9, divisor=3, num_rungs=3, max_trials=2)
    )
    a, b = m.ids
    assert m.send(ValidationCompleted(a, {"loss": 0.5, "epochs": 0}, 5000)) == []
    assert m.rung(0) == []
    assert m.send(ValidationCompleted(a, {"loss": 0.5, "epochs": 1}, 5000)) == [("target", "T0", 3)]
    assert m.send(ValidationCompleted(b, {"loss": 0.9, "epochs": 1}, 10)) == [("stop", "T1")]
    # The time is the time metric, never steps_completed.
    assert m.send(ValidationCompleted(a, {"loss": 0.5}, 10_000)) == []
    assert m.send(ValidationCompleted(a, {"loss": 0.5, "epochs": 9}, 1)) == [("stop", "T0")]


def test_validation_missing_the_metric_or_time_changes_nothing() -> None:
    m = HalvingMaster.start(halving_spec(time_metric="epochs", max_time=9, num_rungs=2, max_trials=2))
    rid = m.ids[0]
    before = m.searcher.to_state()
    for metrics in ({"epochs": 9}, {"loss": 0.1}, {"loss": "x", "epochs": 9}, {"acc": 1.0, "epochs": 9}, {}):
        assert m.send(ValidationCompleted(rid, metrics, 100)) == []
    assert m.searcher.to_state() == before


def test_what_a_decided_trial_reports_afterwards_is_ignored() -> None:
    m = stopping_master()
    assert m.validate("T0", 0.5, 100) == [("target", "T0", 200)]
    assert m.validate("T1", 0.7, 100) == [("stop", "T1"), ("create", "T2", 100)]
    before = m.searcher.to_state()
    # A late validation and an error while stopping neither rank T1 again nor replace it twice.
    assert m.validate("T1", 0.1, 400) == []
    assert m.exit("T1", ExitReason.ERRORED) == []
    after = m.searcher.to_state()["method_state"]
    assert after["rungs"] == before["method_state"]["rungs"]
    assert m.rung(0) == ["T0", "T1"]


def test_legacy_max_length_counts_batches_from_steps_completed() -> None:
    m = HalvingMaster.start(
        halving_spec(time_metric=None, max_time=None, max_length={"batches": 900}, max_trials=3, num_rungs=2)
    )
    assert m.searcher.method.length_unit() == "batches"
    assert m.bracket.lengths == (300, 900)
    a, b, _ = m.ids
    assert m.send(ValidationCompleted(a, {"loss": 0.2}, 300)) == [("target", "T0", 900)]
    assert m.send(ValidationCompleted(b, {"loss": 0.3}, 300)) == [("stop", "T1")]
    assert m.send(ValidationCompleted(a, {"loss": 0.2}, 900)) == [("stop", "T0")]


@pytest.mark.parametrize(
    ("concurrency", "max_trials", "initial"),
    # With no limit (0): divisor^(rungs-1) = 4 trials, enough for one to reach the top, within max_trials.
    [(2, 5, 2), (16, 5, 5), (0, 5, 4), (0, 3, 3)],
)
def test_initial_trials(concurrency: int, max_trials: int, initial: int) -> None:
    m = stopping_master(max_concurrent_trials=concurrency, max_trials=max_trials)
    assert m.answer == [("create", f"T{i}", 100) for i in range(initial)]


@pytest.mark.parametrize(
    ("reason", "expected"),
    [(ExitReason.ERRORED, (False, True)), (ExitReason.USER_CANCELED, (True, False))],
)
def test_shutdown_when_every_trial_exited(reason: ExitReason, expected: tuple[bool, bool]) -> None:
    m = stopping_master(max_trials=3)
    # Each early exit is replaced while the budget lasts.
    assert m.exit("T0", reason) == [("create", "T2", 100)]
    assert m.exit("T1", reason) == []
    assert m.shutdown is None
    assert m.exit("T2", reason) == [("shutdown", *expected)]


def test_determined_asha_stopping_run() -> None:
    # TestASHAStopping: 10 trials, 3 at once, rungs 100/300/900; ever worse results at 100 stop all
    # but the first, which goes on at 300 and is stopped at the top.
    m = HalvingMaster.start(halving_spec(max_trials=10, max_concurrent_trials=3, max_time=900, divisor=3))
    assert len(m.answer) == 3
    loss = 1.0
    waiting = [name for _, name, _ in m.answer]
    stops = 0
    for _ in range(20):
        if not waiting:
            break
        created: list[str] = []
        for name in waiting:
            loss += 1
            answer = m.validate(name, loss, 100)
            stops += sum(1 for a in answer if a[0] == "stop")
            created += [a[1] for a in answer if a[0] == "create"]
        waiting = created
    assert stops == 9 and len(m.ids) == 10
    assert m.validate("T0", loss, 300) == [("target", "T0", 900)]
    assert m.validate("T0", loss, 900) == [("stop", "T0")]


def _lengths_by_metric(spec_fields: dict[str, Any], metrics: list[float]) -> list[tuple[int, ...]]:
    result = preview(halving_spec("adaptive_asha", **spec_fields), REGISTRY, metric_of=lambda n: metrics[n])
    return [t.lengths for t in result.trials]


ADAPTIVE_900 = {"mode": "standard", "max_rungs": 2, "divisor": 3, "max_time": 900, "max_trials": 5}


@pytest.mark.parametrize(
    ("smaller_is_better", "expected"),
    [
        (True, [(300, 900), (300,), (300,), (900,), (900,)]),
        (False, [(300, 900), (300, 900), (300, 900), (900,), (900,)]),
    ],
)
def test_determined_adaptive_asha_simulation(
    smaller_is_better: bool, expected: list[tuple[int, ...]]
) -> None:
    # TestAdaptiveASHAStoppingSearchMethod: trials with constant metrics 0.1 ... 0.5 in creation order.
    lengths = _lengths_by_metric(
        {**ADAPTIVE_900, "smaller_is_better": smaller_is_better}, [0.1, 0.2, 0.3, 0.4, 0.5]
    )
    assert lengths == expected


def test_progress_counts_the_bottom_rung_then_exits() -> None:
    m = stopping_master(max_trials=2, max_concurrent_trials=2)
    assert m.searcher.progress() == 0.0
    m.validate("T0", 0.5, 100)
    assert m.searcher.progress() == pytest.approx(1 / 2.4)
    m.validate("T1", 0.6, 100)  # stopped; rung 0 full
    assert m.searcher.progress() == pytest.approx(2 / 2.4)
    m.exit("T1")
    assert m.searcher.progress() == pytest.approx(2 / 2.4)  # max(2/2.4, 1/2)
    m.validate("T0", 0.5, 400)
    m.exit("T0")
    assert m.searcher.progress() == 1.0
    assert m.shutdown is not None
