"""Pricing the search benchmark's runs by the configurations they trained (bench.hpo.price), and
the hyperparameters the records keep for it; prices are given here, not measured (no PyTorch)."""

from __future__ import annotations

import pytest

from bench.hpo.accounting import EpochReport
from bench.hpo.price import config_key, configurations, measure_prices, priced
from bench.hpo.record import RunRecord, plain_hparams

WIDE = {
    "learning_rate": 0.01,
    "weight_decay": 1e-4,
    "width": 250,
    "depth": 3,
    "dropout": 0.1,
    "batch_size": 32,
}
NARROW = {
    "learning_rate": 0.02,
    "weight_decay": 1e-3,
    "width": 20,
    "depth": 1,
    "dropout": 0.0,
    "batch_size": 256,
}


def _record(
    system: str,
    wall_s: float,
    reports: list[EpochReport],
    hparams: dict[str, dict],
    started_at: float | None = None,
) -> RunRecord:
    return RunRecord(
        system=system,
        seed=0,
        budget=1.0,
        max_epochs=3,
        wall_s=wall_s,
        trials=len(hparams),
        ended_by="budget",
        reports=reports,
        hparams=hparams,
        started_at=started_at,
    )


def test_hyperparameters_round_trip_through_json_in_trial_order() -> None:
    record = _record(
        "cairn_asha_promote",
        10.0,
        [EpochReport("10", 1, 0.5, 1.0), EpochReport("9", 1, 0.4, 2.0)],
        {"10": NARROW, "9": WIDE},
    )
    text = record.to_json()
    # Numeric ids in number order, one trial a line.
    assert text.index('"9": ') < text.index('"10": ')
    assert RunRecord.from_json(text).hparams == {"10": NARROW, "9": WIDE}


def test_a_record_without_hyperparameters_still_reads() -> None:
    record = _record("ray_asha", 5.0, [EpochReport("t1", 1, 0.5, 1.0)], {})
    assert RunRecord.from_json(record.to_json()).hparams == {}


def test_plain_hyperparameters_are_the_six_with_whole_numbers_as_ints() -> None:
    # A protobuf Struct hands integers back as floats; Ray's config carries the trial's seed too.
    given = {**{k: float(v) for k, v in WIDE.items()}, "seed": 12345}
    plain = plain_hparams(given)
    assert plain == WIDE
    assert all(isinstance(plain[name], int) for name in ("width", "depth", "batch_size"))


def test_runs_are_priced_by_the_epochs_each_configuration_trained() -> None:
    # Same budget (three epochs each), different work: one run trained the wide configuration twice.
    heavy = _record(
        "cairn_asha_promote",
        1.5,
        [EpochReport("1", 1, 0.5, 1.0), EpochReport("1", 2, 0.4, 2.0), EpochReport("2", 1, 0.6, 3.0)],
        {"1": WIDE, "2": NARROW},
    )
    light = _record(
        "ray_asha",
        0.5,
        [EpochReport("a", 1, 0.5, 1.0), EpochReport("b", 1, 0.6, 2.0), EpochReport("b", 2, 0.5, 3.0)],
        {"a": WIDE, "b": NARROW},
    )
    configs = configurations([heavy, light])
    assert sorted(configs) == sorted([config_key(WIDE), config_key(NARROW)])
    prices = measure_prices(configs, price=lambda values: 0.5 if values["width"] == 250 else 0.1)
    heavy_run, light_run = priced(heavy, prices), priced(light, prices)
    assert heavy_run.work_s == pytest.approx(1.1)
    assert light_run.work_s == pytest.approx(0.7)
    # Over two workers: 1.1 CPU-s in 1.5 s of wall is 37 %, 0.7 in 0.5 s is 70 %.
    assert heavy_run.share == pytest.approx(1.1 / 3.0)
    assert light_run.time_per_work == pytest.approx(0.5 / 0.7)


def test_a_report_of_a_trial_without_hyperparameters_is_refused_by_name() -> None:
    record = _record("ray_asha", 1.0, [EpochReport("t7", 1, 0.5, 1.0)], {"t1": WIDE})
    with pytest.raises(SystemExit, match="trial t7 has no hyperparameters"):
        configurations([record])


def test_a_run_with_its_start_is_measured_to_the_epoch_that_spent_its_budget() -> None:
    # Budget 1 x 3 epochs: the fourth report came after the budget was spent (a runner that polls
    # notices late); it counts neither in the time nor in the work.
    reports = [
        EpochReport("1", 1, 0.5, 101.0),
        EpochReport("2", 1, 0.6, 101.5),
        EpochReport("1", 2, 0.4, 102.0),
        EpochReport("1", 3, 0.3, 104.0),
    ]
    record = _record("cairn_asha_promote", 5.0, reports, {"1": WIDE, "2": NARROW}, started_at=100.0)
    assert record.budget_s == pytest.approx(2.0)
    assert [(r.trial, r.epoch) for r in record.budget_reports()] == [("1", 1), ("2", 1), ("1", 2)]
    run = priced(record, {config_key(WIDE): 0.5, config_key(NARROW): 0.1})
    assert (run.wall_s, run.elapsed_s, run.epochs, run.trials) == (5.0, pytest.approx(2.0), 3, 2)
    assert run.work_s == pytest.approx(1.1)
    assert run.share == pytest.approx(1.1 / 4.0)

    # Written and read back: the times are then since the start, which reads as 0.
    again = RunRecord.from_json(record.to_json())
    assert again.started_at == 0.0
    assert again.reports[0].wall_time == pytest.approx(1.0)
    assert again.budget_s == pytest.approx(2.0)


def test_a_run_without_its_start_or_short_of_its_budget_is_measured_by_its_wall() -> None:
    reports = [EpochReport("1", 1, 0.5, 101.0), EpochReport("1", 2, 0.4, 102.0)]
    short = _record("ray_asha", 3.0, reports, {"1": WIDE}, started_at=100.0)
    assert short.budget_s is None  # two epochs of a budget of three
    old = _record("ray_asha", 3.0, [*reports, EpochReport("1", 3, 0.3, 103.0)], {"1": WIDE})
    assert old.budget_s is None
    assert RunRecord.from_json(old.to_json()).started_at is None
    for record in (short, old):
        run = priced(record, {config_key(WIDE): 0.5})
        assert (run.elapsed_s, run.epochs) == (3.0, len(record.reports))
