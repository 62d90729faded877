"""The searcher checks the spec itself and names the field that is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.searcher_plugin.errors import InvalidSpec
from cairn.searcher_plugin.spec import SearchSpec
from services.searcher.domain.searcher import Searcher
from tests.unit.searcher.searcher_builders import REGISTRY, make_spec

HP = {"lr": {"type": "double", "minval": 0.1, "maxval": 1.0, "count": 2}}


@pytest.mark.parametrize(
    ("searcher", "hparams", "message"),
    [
        (
            {"name": "foo", "metric": "loss"},
            HP,
            "searcher.name: unknown searcher 'foo' "
            "(this searcher runs: adaptive_asha, async_halving, grid, random, single)",
        ),
        (
            {"metric": "loss"},
            HP,
            "searcher.name: required "
            "(this searcher runs: adaptive_asha, async_halving, grid, random, single)",
        ),
        ({"name": 3, "metric": "loss"}, HP, "searcher.name: must be a string"),
        ({"name": "random", "metric": "loss"}, HP, "searcher.max_trials: required for random search"),
        ({"name": "random", "max_trials": 0}, HP, "searcher.max_trials: must be >= 1, got 0"),
        ({"name": "random", "max_trials": 2.5}, HP, "searcher.max_trials: must be an integer, got 2.5"),
        ({"name": "random", "max_trials": "8"}, HP, "searcher.max_trials: must be an integer, got '8'"),
        (
            {"name": "random", "max_trials": 2, "max_concurrent_trials": -1},
            HP,
            "searcher.max_concurrent_trials: must be >= 0, got -1",
        ),
        (
            {"name": "grid", "max_concurrent_trials": 1.5},
            HP,
            "searcher.max_concurrent_trials: must be an integer",
        ),
        (
            {"name": "random", "max_trials": 2},
            {"lr": {"type": "double", "minval": 2, "maxval": 1}},
            "hyperparameters.lr.minval: must be less than maxval (2.0 >= 1.0)",
        ),
        (
            {"name": "grid"},
            {"lr": {"type": "double", "minval": 0, "maxval": 1}},
            "hyperparameters.lr.count: grid search needs a count for int, double and log hyperparameters",
        ),
        (
            {"name": "single", "max_length": {"batches": 10, "epochs": 1}},
            HP,
            "searcher.max_length: must be an integer or one of",
        ),
        (
            {"name": "single", "max_length": {"steps": 10}},
            HP,
            "searcher.max_length: must be an integer or one of",
        ),
        ({"name": "single", "max_length": -5}, HP, "searcher.max_length: must be >= 0"),
        (
            {"name": "single", "max_length": {"epochs": 1.5}},
            HP,
            "searcher.max_length.epochs: must be an integer",
        ),
    ],
)
def test_bad_specs_name_the_field(searcher: dict[str, Any], hparams: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        Searcher.new(make_spec(searcher, hparams), REGISTRY)
    assert str(caught.value).startswith(message), str(caught.value)


def test_seed_must_fit_32_bits() -> None:
    with pytest.raises(InvalidSpec, match=r"seed: must be in \[0, 2\*\*32\)"):
        SearchSpec({"name": "single"}, {}, 2**32)


def test_non_finite_numbers_are_refused() -> None:
    with pytest.raises(
        InvalidSpec, match=r"hyperparameters\.opt\.vals\[1\]: must be a finite number, got nan"
    ):
        make_spec({"name": "single"}, {"opt": {"type": "categorical", "vals": [1.0, float("nan")]}})


def test_defaults_fill_what_the_master_left_out() -> None:
    searcher = Searcher.new(make_spec({"name": "random", "max_trials": 20}, HP), REGISTRY)
    assert len(searcher.initial_actions()) == 16  # max_concurrent_trials defaults to 16


def test_fields_other_methods_use_are_tolerated() -> None:
    spec = make_spec(
        {
            "name": "single",
            "metric": "acc",
            "smaller_is_better": False,
            "max_trials": 9,
            "source_trial_id": None,
        },
        HP,
    )
    assert len(Searcher.new(spec, REGISTRY).initial_actions()) == 1
