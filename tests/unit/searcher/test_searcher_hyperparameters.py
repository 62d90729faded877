"""Parsing the hyperparameters section and sampling it at random."""

from __future__ import annotations

import math
from typing import Any

import pytest

from cairn.searcher_plugin.errors import InvalidSpec
from services.searcher.domain.hyperparameters import HyperparameterSpace
from services.searcher.domain.rng import MersenneTwister
from tests.unit.searcher.searcher_builders import through_struct

DRAWS = 400


def draws(section: dict[str, Any], seed: int = 0, n: int = DRAWS) -> list[dict[str, Any]]:
    space = HyperparameterSpace.parse(through_struct(section))
    rng = MersenneTwister(seed)
    return [space.sample(rng) for _ in range(n)]


def test_int_is_a_python_int_covering_both_ends() -> None:
    values = [d["n"] for d in draws({"n": {"type": "int", "minval": 2, "maxval": 5}})]
    assert all(type(v) is int for v in values)
    assert set(values) == {2, 3, 4, 5}


def test_double_stays_in_range() -> None:
    values = [d["x"] for d in draws({"x": {"type": "double", "minval": -1.5, "maxval": 2.5}})]
    assert all(isinstance(v, float) and -1.5 <= v < 2.5 for v in values)
    assert min(values) < -1.0 and max(values) > 2.0


def test_log_is_base_to_a_uniform_exponent() -> None:
    values = [d["lr"] for d in draws({"lr": {"type": "log", "minval": -5, "maxval": -1, "base": 10}})]
    assert all(1e-5 <= v < 1e-1 for v in values)
    exponents = [math.log10(v) for v in values]
    # Uniform in the exponent: every decade gets a fair share.
    for decade in range(-5, -1):
        share = sum(decade <= e < decade + 1 for e in exponents) / len(exponents)
        assert 0.15 < share < 0.35


def test_log_with_base_two() -> None:
    values = [d["bs"] for d in draws({"bs": {"type": "log", "minval": 4, "maxval": 8, "base": 2}})]
    assert all(16 <= v < 256 for v in values)


def test_categorical_takes_every_value_as_written() -> None:
    vals = ["sgd", 3, True, [1, 2], {"k": "v"}]
    values = [d["c"] for d in draws({"c": {"type": "categorical", "vals": vals}})]
    assert all(through_struct({"v": v})["v"] in through_struct({"v": vals})["v"] for v in values)
    assert len({repr(v) for v in values}) == len(vals)


def test_consts_keep_their_value() -> None:
    section = {
        "explicit": {"type": "const", "val": 0.25},
        "bare": 64,
        "text": "adam",
        "listed": [1, 2, 3],
        "nothing": None,
    }
    sample = draws(section, n=1)[0]
    assert sample == {
        "explicit": 0.25,
        "bare": 64.0,
        "text": "adam",
        "listed": [1.0, 2.0, 3.0],
        "nothing": None,
    }


def test_nested_groups_mirror_the_nesting() -> None:
    section = {
        "optimizer": {
            "lr": {"type": "double", "minval": 0.0, "maxval": 1.0},
            "betas": {"b1": 0.9, "b2": {"type": "categorical", "vals": [0.99, 0.999]}},
        },
        "empty_group": {},
        "depth": {"type": "int", "minval": 1, "maxval": 3},
    }
    for sample in draws(section, n=20):
        assert set(sample) == {"optimizer", "empty_group", "depth"}
        assert set(sample["optimizer"]) == {"lr", "betas"}
        assert sample["optimizer"]["betas"]["b1"] == 0.9
        assert sample["optimizer"]["betas"]["b2"] in (0.99, 0.999)
        assert sample["empty_group"] == {}


def test_a_top_level_hyperparameter_may_be_named_type() -> None:
    assert draws({"type": "resnet", "width": 2}, n=1)[0] == {"type": "resnet", "width": 2.0}


def test_sampling_is_reproducible_and_seed_dependent() -> None:
    section = {
        "a": {"type": "double", "minval": 0, "maxval": 1},
        "b": {"type": "int", "minval": 0, "maxval": 100},
    }
    assert draws(section, seed=5, n=10) == draws(section, seed=5, n=10)
    assert draws(section, seed=5, n=10) != draws(section, seed=6, n=10)


def test_samples_do_not_share_mutable_values() -> None:
    space = HyperparameterSpace.parse({"l": [1, 2]})
    rng = MersenneTwister(0)
    first, second = space.sample(rng), space.sample(rng)
    first["l"].append(3)
    assert second["l"] == [1, 2]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"lr": {"type": "double", "minval": 1, "maxval": 1}},
            "hyperparameters.lr.minval: must be less than maxval",
        ),
        ({"lr": {"type": "double", "maxval": 1}}, "hyperparameters.lr.minval: required"),
        ({"n": {"type": "int", "minval": 0.5, "maxval": 3}}, "hyperparameters.n.minval: must be an integer"),
        (
            {"n": {"type": "int", "minval": 1, "maxval": 3, "count": 0}},
            "hyperparameters.n.count: must be >= 1",
        ),
        ({"x": {"type": "log", "minval": 1, "maxval": 2}}, "hyperparameters.x.base: required"),
        ({"x": {"type": "log", "minval": 1, "maxval": 2, "base": -2}}, "hyperparameters.x.base: must be > 0"),
        (
            {"x": {"type": "log", "minval": 1, "maxval": 400, "base": 10}},
            "hyperparameters.x.maxval: base ** maxval",
        ),
        ({"c": {"type": "categorical", "vals": []}}, "hyperparameters.c.vals: must be a non-empty list"),
        ({"c": {"type": "const"}}, "hyperparameters.c.val: required"),
        ({"c": {"type": "uniform", "minval": 0, "maxval": 1}}, "hyperparameters.c.type: must be one of"),
        ({"g": {"inner": {"type": "int", "minval": 3, "maxval": 1}}}, "hyperparameters.g.inner.minval"),
        (
            {"d": {"type": "double", "minval": 0, "maxval": 1, "step": 2}},
            "hyperparameters.d.step: unknown field",
        ),
    ],
)
def test_bad_hyperparameters_name_the_field(section: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        HyperparameterSpace.parse(through_struct(section))
    assert str(caught.value).startswith(message), str(caught.value)
