"""The `hyperparameters` section as Optuna distributions, and Optuna's parameters back as hparams.

The master sends the section expanded, in Cairn's (and Determined's) forms:
  {type: const, val}                      fixed; Optuna never sees it
  {type: int, minval, maxval}             IntDistribution(minval, maxval)
  {type: double, minval, maxval}          FloatDistribution(minval, maxval)
  {type: log, minval, maxval, base}       the value is base ** x for x in [minval, maxval]:
                                          FloatDistribution(base**minval, base**maxval, log=True)
  {type: categorical, vals}               CategoricalDistribution over the indices of `vals`
  a mapping without `type`                a nested group; its values mirror the nesting
A bare scalar or list is a const too. `count` (a grid search setting) is accepted and ignored.

Optuna names are the routes joined with dots ("optimizer.lr"). Categorical values reach Optuna as
indices: `vals` may hold anything JSON can (lists, mappings, a mix of 1 and true) while Optuna's
choices must be distinct scalars, and TPE models categories by index anyway.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from cairn.searcher_plugin.errors import InvalidSnapshot, InvalidSpec
from cairn.searcher_plugin.fields import as_float, as_int, is_number, required

Route = tuple[str, ...]
TYPES = ("categorical", "const", "double", "int", "log")


@dataclass(frozen=True)
class SearchedParam:
    route: Route
    distribution: BaseDistribution
    # The categorical values an index stands for; None for numeric parameters.
    vals: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class SearchSpace:
    searched: dict[str, SearchedParam]  # by dotted name, in sorted order
    fixed: tuple[tuple[Route, Any], ...]
    # Every nested group, so that a group holding no values still appears in the hparams.
    groups: tuple[Route, ...]

    def distributions(self) -> dict[str, BaseDistribution]:
        return {name: param.distribution for name, param in self.searched.items()}

    def hparams(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's hparams, nested as in the config, from Optuna's parameters."""
        result: dict[str, Any] = {}
        for route in self.groups:
            _place(result, route, {})
        for route, value in self.fixed:
            _place(result, route, copy.deepcopy(value))
        for name, param in self.searched.items():
            value = params[name]
            _place(result, param.route, copy.deepcopy(param.vals[value]) if param.vals else value)
        return result

    def check_params(self, params: Mapping[str, Any], path: str) -> None:
        """Refuse parameters this space could not have suggested (a snapshot from another spec)."""
        if set(params) != set(self.searched):
            raise InvalidSnapshot(
                f"{path}: names {sorted(params)} do not match the hyperparameters {sorted(self.searched)}"
            )
        for name, param in self.searched.items():
            if not _contains(param.distribution, params[name]):
                raise InvalidSnapshot(f"{path}.{name}: {params[name]!r} is outside {param.distribution}")


def _place(tree: dict[str, Any], route: Route, value: Any) -> None:
    for name in route[:-1]:
        tree = tree.setdefault(name, {})
    tree.setdefault(route[-1], value)


def _contains(distribution: BaseDistribution, value: Any) -> bool:
    whole = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(distribution, CategoricalDistribution):
        return whole and value in distribution.choices
    if isinstance(distribution, IntDistribution):
        return whole and distribution.low <= value <= distribution.high
    assert isinstance(distribution, FloatDistribution)
    return is_number(value) and distribution.low <= value <= distribution.high


def _int_range(raw: Mapping[str, Any], path: str) -> IntDistribution:
    low = as_int(required(raw, "minval", path), f"{path}.minval")
    high = as_int(required(raw, "maxval", path), f"{path}.maxval")
    if not low < high:
        raise InvalidSpec(f"{path}.minval: must be less than maxval ({low} >= {high})")
    return IntDistribution(low, high)


def _float_range(raw: Mapping[str, Any], path: str) -> tuple[float, float]:
    low = as_float(required(raw, "minval", path), f"{path}.minval")
    high = as_float(required(raw, "maxval", path), f"{path}.maxval")
    if not low < high:
        raise InvalidSpec(f"{path}.minval: must be less than maxval ({low} >= {high})")
    return low, high


def _log_range(raw: Mapping[str, Any], path: str) -> FloatDistribution:
    low, high = _float_range(raw, path)
    base = as_float(required(raw, "base", path), f"{path}.base")
    if base <= 0 or base == 1:
        raise InvalidSpec(f"{path}.base: must be > 0 and not 1, got {base}")
    try:
        ends = sorted((math.pow(base, low), math.pow(base, high)))
    except OverflowError:
        ends = [math.inf]
    if not all(0 < end < math.inf for end in ends) or ends[0] == ends[-1]:
        raise InvalidSpec(
            f"{path}: base ** minval and base ** maxval must be distinct positive finite doubles "
            f"({base} ** {low}, {base} ** {high})"
        )
    return FloatDistribution(ends[0], ends[1], log=True)


class _Builder:
    def __init__(self) -> None:
        self.searched: dict[str, SearchedParam] = {}
        self.fixed: list[tuple[Route, Any]] = []
        self.groups: list[Route] = []
        self._paths: dict[str, str] = {}

    def group(self, raw: Mapping[str, Any], route: Route, path: str) -> None:
        for name in sorted(raw):
            self.value(raw[name], (*route, name), f"{path}.{name}")

    def value(self, raw: Any, route: Route, path: str) -> None:
        if isinstance(raw, Mapping) and "type" not in raw:
            self.groups.append(route)
            self.group(raw, route, path)
        elif isinstance(raw, Mapping):
            self.typed(raw, route, path)
        else:
            self.fixed.append((route, raw))

    def typed(self, raw: Mapping[str, Any], route: Route, path: str) -> None:
        kind = raw["type"]
        if kind not in TYPES:
            raise InvalidSpec(f"{path}.type: unsupported type {kind!r} (supported: {', '.join(TYPES)})")
        if kind == "const":
            if "val" not in raw:
                raise InvalidSpec(f"{path}.val: required")
            self.fixed.append((route, raw["val"]))
            return
        if kind == "categorical":
            vals = raw.get("vals")
            if not isinstance(vals, list) or not vals:
                raise InvalidSpec(f"{path}.vals: must be a non-empty list")
            param = SearchedParam(route, CategoricalDistribution(tuple(range(len(vals)))), tuple(vals))
        elif kind == "int":
            param = SearchedParam(route, _int_range(raw, path))
        elif kind == "double":
            param = SearchedParam(route, FloatDistribution(*_float_range(raw, path)))
        else:
            param = SearchedParam(route, _log_range(raw, path))
        name = ".".join(route)
        if name in self._paths:
            raise InvalidSpec(f"{path}: its dotted name '{name}' is also that of {self._paths[name]}")
        self._paths[name] = path
        self.searched[name] = param


def parse_space(raw: Mapping[str, Any], path: str = "hyperparameters") -> SearchSpace:
    # The top level is always a group: a hyperparameter may itself be named `type`.
    builder = _Builder()
    builder.group(raw, (), path)
    return SearchSpace(
        searched=dict(sorted(builder.searched.items())),
        fixed=tuple(builder.fixed),
        groups=tuple(builder.groups),
    )
