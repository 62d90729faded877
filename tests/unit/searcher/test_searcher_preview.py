"""PreviewSearch: the trials a spec would create, and legacy lengths."""

from __future__ import annotations

import pytest

from cairn.searcher_plugin.errors import InvalidSpec
from cairn.searcher_plugin.spec import SearchSpec
from services.searcher.domain import preview as preview_module
from services.searcher.domain.preview import preview
from tests.unit.searcher.searcher_builders import REGISTRY, MasterDriver, grid_spec, make_spec, random_spec

GRID = {
    "a": {"type": "int", "minval": 0, "maxval": 4, "count": 3},
    "b": {"type": "categorical", "vals": [1, 2]},
}


@pytest.mark.parametrize(
    "spec", [random_spec(6, 2, seed=3), grid_spec(GRID, concurrency=2), random_spec(3, 0)]
)
def test_preview_lists_the_trials_a_session_creates(spec: SearchSpec) -> None:
    result = preview(spec, REGISTRY)
    driver = MasterDriver.start(spec)
    driver.run_to_end()
    assert [(t.request_id, t.hparams) for t in result.trials] == [
        (c.request_id, c.hparams) for c in driver.created
    ]
    assert all(t.lengths == () and t.bracket == 0 for t in result.trials)
    assert result.unit == ""


@pytest.mark.parametrize(
    ("max_length", "unit", "units"),
    [(1000, "batches", 1000), ({"epochs": 3}, "epochs", 3), ({"records": 50000}, "records", 50000)],
)
def test_legacy_max_length_gives_one_length_and_its_unit(max_length: object, unit: str, units: int) -> None:
    for name in ("single", "random", "grid"):
        searcher = {"name": name, "metric": "loss", "max_trials": 2, "max_length": max_length}
        result = preview(make_spec(searcher, {"x": {"type": "categorical", "vals": [1, 2]}}), REGISTRY)
        assert result.unit == unit
        assert result.trials and all(t.lengths == (units,) for t in result.trials)


def test_single_previews_one_trial() -> None:
    result = preview(make_spec({"name": "single", "metric": "loss"}, {"x": 1}), REGISTRY)
    assert len(result.trials) == 1
    assert result.trials[0].hparams == {"x": 1.0}


def test_preview_refuses_what_it_cannot_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preview_module, "MAX_PREVIEW_TRIALS", 50)
    spec = make_spec({"name": "random", "max_trials": 51, "max_concurrent_trials": 1}, {})
    with pytest.raises(InvalidSpec, match="more than 50 trials, too many to preview"):
        preview(spec, REGISTRY)
    assert len(preview(make_spec({"name": "random", "max_trials": 50}, {}), REGISTRY).trials) == 50
