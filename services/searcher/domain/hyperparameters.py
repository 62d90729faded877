"""The `hyperparameters` section as a typed tree: parsing with field-path errors, and random sampling.

Forms (Determined 0.38): `{type: const, val}`, a bare scalar or list (an implicit const),
`{type: int|double, minval, maxval, count?}`, `{type: log, minval, maxval, base, count?}` (the value is
base ** x), `{type: categorical, vals}`, and nested groups — a mapping without `type` — whose sampled
values mirror the nesting. Names are visited in sorted order at every level, so one seed always
draws the same values for the same section.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cairn.searcher_plugin.errors import InvalidSpec
from cairn.searcher_plugin.fields import as_float, as_int, int_field, required
from services.searcher.domain.rng import MersenneTwister


@dataclass(frozen=True)
class ConstParam:
    value: Any


@dataclass(frozen=True)
class IntParam:
    minval: int
    maxval: int
    count: int | None


@dataclass(frozen=True)
class DoubleParam:
    minval: float
    maxval: float
    count: int | None


@dataclass(frozen=True)
class LogParam:
    minval: float
    maxval: float
    base: float
    count: int | None


@dataclass(frozen=True)
class CategoricalParam:
    vals: tuple[Any, ...]


@dataclass(frozen=True)
class NestedParams:
    children: tuple[tuple[str, Param], ...]  # sorted by name


Param = ConstParam | IntParam | DoubleParam | LogParam | CategoricalParam | NestedParams
NumericParam = IntParam | DoubleParam | LogParam

_FIELDS: dict[str, frozenset[str]] = {
    "const": frozenset({"type", "val"}),
    "int": frozenset({"type", "minval", "maxval", "count"}),
    "double": frozenset({"type", "minval", "maxval", "count"}),
    "log": frozenset({"type", "minval", "maxval", "base", "count"}),
    "categorical": frozenset({"type", "vals"}),
}


def _check_fields(raw: Mapping[str, Any], kind: str, path: str) -> None:
    allowed = _FIELDS[kind]
    for key in sorted(raw):
        if key not in allowed:
            known = ", ".join(sorted(allowed))
            raise InvalidSpec(f"{path}.{key}: unknown field for a {kind} hyperparameter (fields: {known})")


def _range(raw: Mapping[str, Any], path: str, *, integer: bool) -> tuple[Any, Any]:
    read = as_int if integer else as_float
    minval = read(required(raw, "minval", path), f"{path}.minval")
    maxval = read(required(raw, "maxval", path), f"{path}.maxval")
    if not minval < maxval:
        raise InvalidSpec(f"{path}.minval: must be less than maxval ({minval} >= {maxval})")
    if not integer and not math.isfinite(maxval - minval):
        raise InvalidSpec(f"{path}: the range [{minval}, {maxval}] is too wide for a double")
    return minval, maxval


def _count(raw: Mapping[str, Any], path: str) -> int | None:
    if raw.get("count") is None:
        return None
    return int_field(raw, "count", path, minimum=1)


def _parse_typed(raw: Mapping[str, Any], path: str) -> Param:
    kind = raw["type"]
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise InvalidSpec(f"{path}.type: must be one of {', '.join(sorted(_FIELDS))}, got {kind!r}")
    _check_fields(raw, kind, path)
    if kind == "const":
        if "val" not in raw:
            raise InvalidSpec(f"{path}.val: required")
        return ConstParam(raw["val"])
    if kind == "int":
        low, high = _range(raw, path, integer=True)
        return IntParam(low, high, _count(raw, path))
    if kind == "double":
        low_f, high_f = _range(raw, path, integer=False)
        return DoubleParam(low_f, high_f, _count(raw, path))
    if kind == "log":
        low_f, high_f = _range(raw, path, integer=False)
        base = as_float(required(raw, "base", path), f"{path}.base")
        if base <= 0:
            raise InvalidSpec(f"{path}.base: must be > 0, got {base}")
        for end, exponent in (("minval", low_f), ("maxval", high_f)):
            try:
                math.pow(base, exponent)
            except OverflowError:
                raise InvalidSpec(f"{path}.{end}: base ** {end} overflows a double ({base} ** {exponent})")
        return LogParam(low_f, high_f, base, _count(raw, path))
    vals = raw.get("vals")
    if not isinstance(vals, list) or not vals:
        raise InvalidSpec(f"{path}.vals: must be a non-empty list")
    return CategoricalParam(tuple(vals))


def parse_group(raw: Mapping[str, Any], path: str) -> NestedParams:
    for name in raw:
        if not isinstance(name, str):
            raise InvalidSpec(f"{path}: hyperparameter names must be strings, got {name!r}")
    return NestedParams(tuple((name, parse_param(raw[name], f"{path}.{name}")) for name in sorted(raw)))


def parse_param(raw: Any, path: str) -> Param:
    if isinstance(raw, Mapping):
        if "type" in raw:
            return _parse_typed(raw, path)
        return parse_group(raw, path)
    return ConstParam(raw)  # a bare scalar or list is an implicit const


def sample_param(param: Param, rng: MersenneTwister) -> Any:
    if isinstance(param, ConstParam):
        return copy.deepcopy(param.value)
    if isinstance(param, IntParam):
        return param.minval + rng.intn(param.maxval - param.minval + 1)
    if isinstance(param, DoubleParam):
        return rng.uniform(param.minval, param.maxval)
    if isinstance(param, LogParam):
        return math.pow(param.base, rng.uniform(param.minval, param.maxval))
    if isinstance(param, CategoricalParam):
        return copy.deepcopy(param.vals[rng.intn(len(param.vals))])
    return {name: sample_param(child, rng) for name, child in param.children}


@dataclass(frozen=True)
class HyperparameterSpace:
    root: NestedParams

    @classmethod
    def parse(cls, raw: Mapping[str, Any], path: str = "hyperparameters") -> HyperparameterSpace:
        # The top level is always a group: a hyperparameter may itself be named `type`.
        return cls(parse_group(raw, path))

    def sample(self, rng: MersenneTwister) -> dict[str, Any]:
        values = sample_param(self.root, rng)
        assert isinstance(values, dict)
        return values

    def leaves(self) -> Iterator[tuple[tuple[str, ...], Param]]:
        """Every non-group hyperparameter with its route of names, in sampling order."""

        def walk(group: NestedParams, route: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Param]]:
            for name, child in group.children:
                if isinstance(child, NestedParams):
                    yield from walk(child, (*route, name))
                else:
                    yield (*route, name), child

        return walk(self.root, ())

    def skeleton(self) -> dict[str, Any]:
        """The group structure with no values: the frame a grid point is filled into."""

        def frame(group: NestedParams) -> dict[str, Any]:
            return {name: frame(child) for name, child in group.children if isinstance(child, NestedParams)}

        return frame(self.root)
