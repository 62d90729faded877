"""grid_size: how many trials a grid search over a hyperparameter space creates."""

from __future__ import annotations

from typing import Any

import pytest

from services.master.domain.config import grid_size


@pytest.mark.parametrize(
    ("hparams", "expected"),
    [
        ({}, 1),
        ({"a": 1, "b": [1, 2, 3], "c": {"type": "const", "val": 5}}, 1),
        ({"c": {"type": "categorical", "vals": ["a", "b", "c"]}}, 3),
        ({"lr": {"type": "double", "minval": 0, "maxval": 1, "count": 4}}, 4),
        ({"lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10, "count": 2}}, 2),
        ({"n": {"type": "int", "minval": 1, "maxval": 8, "count": 3}}, 3),
        # Only 3 distinct integers in [1, 3]: a count of 10 still gives 3 points.
        ({"n": {"type": "int", "minval": 1, "maxval": 3, "count": 10}}, 3),
        (
            {
                "opt": {
                    "lr": {"type": "double", "minval": 0, "maxval": 1, "count": 2},
                    "inner": {"m": {"type": "categorical", "vals": [0.9, 0.99]}},
                },
                "n": {"type": "int", "minval": 0, "maxval": 9, "count": 5},
                "k": 7,
            },
            20,
        ),
    ],
)
def test_grid_size_is_the_product_of_value_counts(hparams: dict[str, Any], expected: int) -> None:
    assert grid_size(hparams) == expected


def test_a_range_without_count_has_no_grid() -> None:
    with pytest.raises(ValueError, match=r"hyperparameters\.opt\.lr\.count: grid search needs a count"):
        grid_size({"opt": {"lr": {"type": "double", "minval": 0, "maxval": 1}}})
