"""The grid of a grid search: one axis per hyperparameter, their cartesian product as trials.

Axis values follow Determined: `count` points evenly spaced from minval to maxval inclusive (the
midpoint when count is 1); ints are rounded half away from zero and their count is clamped to the
number of integers in the range; log axes space the exponent; categoricals take every value and
consts their one value. Points are ordered with the first axis (by sorted name, groups expanded in
place) varying slowest. A point is computed from its index, so the grid is never held in memory and
a snapshot needs only a count of points handed out.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from cairn.searcher_plugin.errors import InvalidSpec
from services.searcher.domain.hyperparameters import (
    CategoricalParam,
    ConstParam,
    DoubleParam,
    HyperparameterSpace,
    IntParam,
    LogParam,
    Param,
)

# Grids grow multiplicatively and by accident (five hyperparameters with count 100 is 10^10 trials).
MAX_GRID_POINTS = 1_000_000
COUNT_NEEDED = "grid search needs a count for int, double and log hyperparameters"


def round_half_away(value: float) -> int:
    """Go's math.Round (Python's round() rounds halves to even)."""
    whole = math.trunc(value)
    if abs(value - whole) >= 0.5:
        whole += 1 if value > 0 else -1
    return int(whole)


def _int_axis(param: IntParam, count: int) -> list[Any]:
    count = min(count, param.maxval - param.minval + 1)
    if count == 1:
        return [round_half_away((param.minval + param.maxval) / 2.0)]
    span = param.maxval - param.minval
    return [round_half_away(param.minval + (i * span) / (count - 1)) for i in range(count)]


def _double_axis(minval: float, maxval: float, count: int) -> list[float]:
    if count == 1:
        return [(minval + maxval) / 2.0]
    return [minval + i * (maxval - minval) / (count - 1) for i in range(count)]


def axis_values(param: Param, path: str) -> list[Any]:
    if isinstance(param, ConstParam):
        return [param.value]
    if isinstance(param, CategoricalParam):
        return list(param.vals)
    if isinstance(param, (IntParam, DoubleParam, LogParam)):
        if param.count is None:
            raise InvalidSpec(f"{path}.count: {COUNT_NEEDED}")
        if isinstance(param, IntParam):
            return _int_axis(param, param.count)
        exponents = _double_axis(param.minval, param.maxval, param.count)
        if isinstance(param, DoubleParam):
            return exponents
        return [math.pow(param.base, x) for x in exponents]
    raise AssertionError(f"groups are expanded into their members, not an axis: {path}")


@dataclass(frozen=True)
class GridAxis:
    route: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Grid:
    axes: tuple[GridAxis, ...]
    skeleton: dict[str, Any]

    @classmethod
    def build(cls, space: HyperparameterSpace, path: str = "hyperparameters") -> Grid:
        axes = tuple(
            GridAxis(route, tuple(axis_values(param, ".".join((path, *route)))))
            for route, param in space.leaves()
        )
        grid = cls(axes, space.skeleton())
        if grid.size > MAX_GRID_POINTS:
            raise InvalidSpec(
                f"{path}: the grid has {grid.size} points; grid search runs at most {MAX_GRID_POINTS} trials "
                "(lower some counts)"
            )
        return grid

    @property
    def size(self) -> int:
        # The product of no axes is one point: an empty section still runs one trial.
        return math.prod(len(axis.values) for axis in self.axes)

    def point(self, index: int) -> dict[str, Any]:
        """The hyperparameters at `index` in cartesian order (first axis slowest)."""
        if not 0 <= index < self.size:
            raise IndexError(f"grid point {index} outside [0, {self.size})")
        digits: list[int] = []
        for axis in reversed(self.axes):
            index, digit = divmod(index, len(axis.values))
            digits.append(digit)
        hparams = copy.deepcopy(self.skeleton)
        for axis, digit in zip(self.axes, reversed(digits), strict=True):
            target = hparams
            for name in axis.route[:-1]:
                target = target[name]
            target[axis.route[-1]] = copy.deepcopy(axis.values[digit])
        return hparams
