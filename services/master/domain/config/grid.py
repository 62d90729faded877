"""How many trials a grid search over a hyperparameter space creates."""

from __future__ import annotations

import math
from typing import Any

from services.master.domain.config.paths import child_path
from services.master.domain.config.schema import GRID_COUNT_MESSAGE


def _points(spec: Any, path: str) -> int:
    if not isinstance(spec, dict):
        return 1  # an implicit const
    kind = spec.get("type")
    if kind is None:
        return _product(spec, path)
    if kind == "const":
        return 1
    if kind == "categorical":
        return len(spec["vals"])
    count = spec.get("count")
    if count is None:
        raise ValueError(f"{child_path(path, 'count')}: {GRID_COUNT_MESSAGE}")
    if kind == "int":
        # A grid cannot hold more distinct integers than the range has.
        return min(int(count), int(spec["maxval"]) - int(spec["minval"]) + 1)
    return int(count)


def _product(hparams: dict[str, Any], path: str) -> int:
    return math.prod(_points(spec, child_path(path, str(name))) for name, spec in hparams.items())


def grid_size(hyperparameters: dict[str, Any]) -> int:
    """The number of points in the grid: the product over hyperparameters of their value counts.

    ValueError when an int, double or log hyperparameter has no count (a config that is not valid
    for grid search).
    """
    return _product(hyperparameters, "hyperparameters")
