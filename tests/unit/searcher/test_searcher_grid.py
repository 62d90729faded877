"""Grid construction against worked examples, and grid search's trial order."""

from __future__ import annotations

from typing import Any

import pytest

from cairn.searcher_plugin.errors import InvalidSpec
from services.searcher.domain.grid import MAX_GRID_POINTS, Grid, round_half_away
from services.searcher.domain.hyperparameters import HyperparameterSpace
from tests.unit.searcher.searcher_builders import MasterDriver, grid_spec, through_struct


def grid_of(section: dict[str, Any]) -> Grid:
    return Grid.build(HyperparameterSpace.parse(through_struct(section)))


def axis(param: dict[str, Any]) -> list[Any]:
    return [grid_of({"p": param}).point(i)["p"] for i in range(grid_of({"p": param}).size)]


@pytest.mark.parametrize(
    ("param", "values"),
    [
        # count evenly spaced points from minval to maxval inclusive, ints rounded half away from zero
        ({"type": "int", "minval": 1, "maxval": 4, "count": 3}, [1, 3, 4]),  # 1, 2.5, 4
        ({"type": "int", "minval": 0, "maxval": 10, "count": 5}, [0, 3, 5, 8, 10]),  # 0, 2.5, 5, 7.5, 10
        (
            {"type": "int", "minval": -10, "maxval": 0, "count": 5},
            [-10, -8, -5, -3, 0],
        ),  # -7.5 → -8, -2.5 → -3
        # a count above the number of integers in the range is clamped to it
        ({"type": "int", "minval": 1, "maxval": 3, "count": 10}, [1, 2, 3]),
        # count 1: the midpoint
        ({"type": "int", "minval": 1, "maxval": 4, "count": 1}, [3]),
        ({"type": "int", "minval": -4, "maxval": -1, "count": 1}, [-3]),
        ({"type": "double", "minval": 0, "maxval": 1, "count": 3}, [0.0, 0.5, 1.0]),
        ({"type": "double", "minval": -1, "maxval": 1, "count": 5}, [-1.0, -0.5, 0.0, 0.5, 1.0]),
        ({"type": "double", "minval": 2, "maxval": 3, "count": 1}, [2.5]),
        ({"type": "log", "minval": -3, "maxval": -1, "base": 10, "count": 3}, [0.001, 0.01, 0.1]),
        ({"type": "log", "minval": 1, "maxval": 4, "base": 2, "count": 4}, [2.0, 4.0, 8.0, 16.0]),
        ({"type": "log", "minval": 0, "maxval": 2, "base": 10, "count": 1}, [10.0]),
        ({"type": "categorical", "vals": ["a", "b", "c"]}, ["a", "b", "c"]),
        ({"type": "const", "val": 7}, [7.0]),
    ],
)
def test_axis_values(param: dict[str, Any], values: list[Any]) -> None:
    assert axis(param) == pytest.approx(values)
    if param["type"] == "int":
        assert all(type(v) is int for v in axis(param))


def test_round_half_away_from_zero() -> None:
    assert [round_half_away(x) for x in (2.5, 3.5, -2.5, 0.49999999999999994, -0.5, 1.4)] == [
        3,
        4,
        -3,
        0,
        -1,
        1,
    ]


def test_points_are_the_cartesian_product_first_name_slowest() -> None:
    grid = grid_of(
        {
            "b": {"type": "categorical", "vals": ["x", "y"]},
            "a": {"type": "int", "minval": 1, "maxval": 3, "count": 3},
            "c": 5,
        }
    )
    assert grid.size == 6
    assert [grid.point(i) for i in range(grid.size)] == [
        {"a": 1, "b": "x", "c": 5.0},
        {"a": 1, "b": "y", "c": 5.0},
        {"a": 2, "b": "x", "c": 5.0},
        {"a": 2, "b": "y", "c": 5.0},
        {"a": 3, "b": "x", "c": 5.0},
        {"a": 3, "b": "y", "c": 5.0},
    ]


def test_nested_hyperparameters_expand_into_axes() -> None:
    grid = grid_of(
        {
            "opt": {"lr": {"type": "double", "minval": 0, "maxval": 1, "count": 2}, "kind": "sgd"},
            "depth": {"type": "categorical", "vals": [1, 2]},
        }
    )
    assert grid.size == 4
    assert [grid.point(i) for i in range(4)] == [
        {"depth": 1.0, "opt": {"kind": "sgd", "lr": 0.0}},
        {"depth": 1.0, "opt": {"kind": "sgd", "lr": 1.0}},
        {"depth": 2.0, "opt": {"kind": "sgd", "lr": 0.0}},
        {"depth": 2.0, "opt": {"kind": "sgd", "lr": 1.0}},
    ]


def test_an_empty_section_is_one_trial() -> None:
    grid = grid_of({})
    assert grid.size == 1
    assert grid.point(0) == {}


def test_numeric_hyperparameters_need_a_count() -> None:
    with pytest.raises(InvalidSpec) as caught:
        grid_of({"opt": {"lr": {"type": "log", "minval": -3, "maxval": -1, "base": 10}}})
    assert str(caught.value) == (
        "hyperparameters.opt.lr.count: grid search needs a count for int, double and log hyperparameters"
    )


def test_a_grid_too_large_is_refused() -> None:
    huge = {f"h{i}": {"type": "int", "minval": 0, "maxval": 1000, "count": 100} for i in range(4)}
    with pytest.raises(InvalidSpec, match=f"at most {MAX_GRID_POINTS} trials"):
        grid_of(huge)


def test_grid_search_creates_every_point_once_from_the_last_backwards() -> None:
    section = {
        "a": {"type": "int", "minval": 1, "maxval": 3, "count": 3},
        "b": {"type": "categorical", "vals": [0, 1]},
    }
    driver = MasterDriver.start(grid_spec(section, concurrency=2))
    assert len(driver.created) == 2
    driver.run_to_end()
    grid = grid_of(section)
    assert [c.hparams for c in driver.created] == [grid.point(i) for i in reversed(range(grid.size))]
    assert driver.max_running_seen == 2
    assert driver.shutdown is not None and not driver.shutdown.cancel and not driver.shutdown.failure


def test_grid_with_unlimited_concurrency_creates_everything_at_once() -> None:
    section = {"a": {"type": "categorical", "vals": [1, 2, 3, 4, 5]}}
    driver = MasterDriver.start(grid_spec(section, concurrency=0))
    assert len(driver.created) == 5
