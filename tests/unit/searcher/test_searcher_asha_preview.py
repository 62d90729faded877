"""PreviewSearch for the halving searches: simulated with synthetic metrics, lengths rung by rung."""

from __future__ import annotations

from typing import Any

import pytest

from services.searcher.domain.preview import preview
from services.searcher.domain.sessions import SessionManager
from tests.unit.searcher.searcher_asha_builders import halving_spec
from tests.unit.searcher.searcher_builders import REGISTRY, creates


@pytest.mark.parametrize("stop_once", [True, False])
def test_async_halving_preview_shape(stop_once: bool) -> None:
    spec = halving_spec(stop_once=stop_once, max_trials=27, max_concurrent_trials=4, divisor=3, max_time=900)
    result = preview(spec, REGISTRY)
    assert result.unit == "batches"
    assert len(result.trials) == 27
    rungs = (100, 300, 900)
    for trial in result.trials:
        # Every trial trains rung by rung from the bottom, as far as its results take it.
        assert trial.lengths == rungs[: len(trial.lengths)] and trial.lengths
        assert trial.bracket == 0
    reached = [sum(1 for t in result.trials if len(t.lengths) > r) for r in range(3)]
    assert reached[0] == 27
    if stop_once:
        assert 1 <= reached[2] <= reached[1] < 27
    else:
        # At least each rung's final top third went on (asynchrony can promote a few more: a trial
        # promoted while in the top may later be overtaken).
        assert reached[1] >= 9 and reached[2] >= reached[1] // 3


def test_promotion_preview_with_results_in_order_promotes_exactly_the_top_third() -> None:
    spec = halving_spec(stop_once=False, max_trials=27, max_concurrent_trials=4, divisor=3, max_time=900)
    result = preview(spec, REGISTRY, metric_of=float)
    reached = [sum(1 for t in result.trials if len(t.lengths) > r) for r in range(3)]
    assert reached == [27, 9, 3]


@pytest.mark.parametrize("stop_once", [True, False])
def test_preview_is_deterministic_and_starts_like_a_session(stop_once: bool) -> None:
    spec = halving_spec("adaptive_asha", stop_once=stop_once, max_trials=20, max_concurrent_trials=4, seed=11)
    first = preview(spec, REGISTRY)
    assert first == preview(spec, REGISTRY)
    initial = creates(SessionManager(REGISTRY).start("s", spec).actions)
    assert [(t.request_id, t.hparams) for t in first.trials[: len(initial)]] == [
        (c.request_id, c.hparams) for c in initial
    ]
    assert {t.bracket for t in first.trials} == {0, 1}  # max_rungs capped to 3: brackets of 3 and 2
    other_seed = preview(halving_spec("adaptive_asha", stop_once=stop_once, max_trials=20, seed=12), REGISTRY)
    assert [t.request_id for t in other_seed.trials] != [t.request_id for t in first.trials]


def test_adaptive_preview_reports_each_brackets_rungs() -> None:
    # Standard mode, max_rungs 3, 900 batches, divisor 3: brackets of 3 rungs (11 trials) and 2 (5).
    result = preview(
        halving_spec("adaptive_asha", max_rungs=3, max_trials=16, max_concurrent_trials=4), REGISTRY
    )
    by_bracket = {b: [t for t in result.trials if t.bracket == b] for b in (0, 1)}
    assert [len(by_bracket[0]), len(by_bracket[1])] == [11, 5]
    assert all(t.lengths[0] == 100 for t in by_bracket[0])
    assert all(t.lengths[0] == 300 for t in by_bracket[1])
    assert all(t.lengths[-1] <= 900 for t in result.trials)


@pytest.mark.parametrize(
    ("fields", "unit", "top"),
    [
        ({"time_metric": "epochs", "max_time": 27}, "epochs", 27),
        ({"time_metric": None, "max_time": None, "max_length": 900}, "batches", 900),
        ({"time_metric": None, "max_time": None, "max_length": {"records": 9000}}, "records", 9000),
    ],
)
def test_preview_unit_is_the_time_metric(fields: dict[str, Any], unit: str, top: int) -> None:
    result = preview(halving_spec(max_trials=9, **fields), REGISTRY)
    assert result.unit == unit
    assert max(t.lengths[-1] for t in result.trials) == top


def test_scripted_metrics_replay_a_known_search() -> None:
    # Ever better results: in stopping ASHA each new trial ranks first and goes on to the top.
    spec = halving_spec(max_trials=4, max_concurrent_trials=1, divisor=2, num_rungs=2, max_time=200)
    result = preview(spec, REGISTRY, metric_of=lambda n: 1.0 - n / 10)
    assert [t.lengths for t in result.trials] == [(100, 200)] * 4
    # Ever worse: only the first goes on.
    result = preview(spec, REGISTRY, metric_of=lambda n: n / 10)
    assert [t.lengths for t in result.trials] == [(100, 200), (100,), (100,), (100,)]
