"""The `async_halving` and `adaptive_asha` sections, checked and read into typed settings.

The master expands defaults before the searcher sees a section; the same defaults are applied here so
that a section written by hand (a test, a custom master) runs the same. How far trials train comes
from `time_metric` + `max_time` (Determined 0.38) or, failing those, the legacy `max_length`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.searcher_plugin.errors import InvalidSpec
from cairn.searcher_plugin.fields import as_float, as_int, bool_field, int_field, str_field
from services.searcher.domain.lengths import legacy_max_length
from services.searcher.domain.methods.common import max_concurrent_trials

DEFAULT_DIVISOR = 4.0
DEFAULT_MAX_RUNGS = 5
DEFAULT_MODE = "standard"
ADAPTIVE_MODES = ("aggressive", "standard", "conservative")
# Determined sets no ceiling; these keep a snapshot (written after every event) and a bracket list
# small. Rungs past a few dozen are all one unit long anyway.
MAX_RUNGS = 64
MAX_BRACKETS = 64


@dataclass(frozen=True)
class Objective:
    """The searcher metric and its direction."""

    metric: str
    smaller_is_better: bool

    def signed(self, value: float) -> float:
        """The value ranked ascending: larger-is-better metrics are negated, as Determined does."""
        return value if self.smaller_is_better else -value


@dataclass(frozen=True)
class TimeBudget:
    """How far a trial may train, and the validation metric that says how far it got.

    `unit` is `time_metric`, or the legacy `max_length`'s unit (`batches` for a bare number).
    """

    unit: str
    max_time: int


@dataclass(frozen=True)
class HalvingConfig:
    """One asynchronous successive-halving search: `async_halving`, or one bracket of adaptive_asha."""

    objective: Objective
    time: TimeBudget
    divisor: float
    num_rungs: int
    max_trials: int
    # 0: no limit.
    max_concurrent_trials: int


@dataclass(frozen=True)
class AdaptiveConfig:
    objective: Objective
    time: TimeBudget
    divisor: float
    max_trials: int
    max_concurrent_trials: int
    mode: str
    max_rungs: int
    # Empty: derived from `mode`.
    bracket_rungs: tuple[int, ...]


def objective(searcher: Mapping[str, Any], path: str) -> Objective:
    return Objective(
        metric=str_field(searcher, "metric", path),
        smaller_is_better=bool_field(searcher, "smaller_is_better", path, default=True),
    )


def time_budget(searcher: Mapping[str, Any], path: str) -> TimeBudget:
    has_metric = searcher.get("time_metric") is not None
    has_max = searcher.get("max_time") is not None
    if has_metric or has_max:
        if not has_metric:
            raise InvalidSpec(f"{path}.time_metric: required with max_time")
        if not has_max:
            raise InvalidSpec(f"{path}.max_time: required with time_metric")
        return TimeBudget(
            unit=str_field(searcher, "time_metric", path),
            max_time=int_field(searcher, "max_time", path, minimum=1),
        )
    length = legacy_max_length(searcher, path)
    if length is None:
        raise InvalidSpec(
            f"{path}.time_metric: required, with max_time (or the legacy max_length), "
            f"for {searcher.get('name')}"
        )
    if length.units < 1:
        raise InvalidSpec(f"{path}.max_length: must be >= 1, got {length.units}")
    return TimeBudget(unit=length.unit, max_time=length.units)


def divisor(searcher: Mapping[str, Any], path: str) -> float:
    raw = searcher.get("divisor")
    if raw is None:
        return DEFAULT_DIVISOR
    value = as_float(raw, f"{path}.divisor")
    if value <= 1:
        raise InvalidSpec(f"{path}.divisor: must be > 1, got {raw}")
    return value


def stop_once(searcher: Mapping[str, Any], path: str = "searcher") -> bool:
    """true: Determined 0.38's stopping ASHA; false: Cairn's promotion mode."""
    return bool_field(searcher, "stop_once", path, default=True)


def _rung_count(searcher: Mapping[str, Any], key: str, path: str, default: int | None) -> int:
    value = int_field(searcher, key, path, default=default, minimum=1, why=f" for {searcher.get('name')}")
    if value > MAX_RUNGS:
        raise InvalidSpec(f"{path}.{key}: must be <= {MAX_RUNGS}, got {value}")
    return value


def _max_trials(searcher: Mapping[str, Any], path: str) -> int:
    return int_field(searcher, "max_trials", path, minimum=1, why=f" for {searcher.get('name')}")


def async_halving_config(searcher: Mapping[str, Any], path: str = "searcher") -> HalvingConfig:
    # Field order: the first problem reported is the first a reader meets in the section.
    return HalvingConfig(
        objective=objective(searcher, path),
        max_trials=_max_trials(searcher, path),
        num_rungs=_rung_count(searcher, "num_rungs", path, None),
        time=time_budget(searcher, path),
        divisor=divisor(searcher, path),
        max_concurrent_trials=max_concurrent_trials(searcher, path),
    )


def _bracket_rungs(searcher: Mapping[str, Any], path: str, max_rungs: int) -> tuple[int, ...]:
    raw = searcher.get("bracket_rungs")
    if raw is None:
        return ()
    where = f"{path}.bracket_rungs"
    if not isinstance(raw, list):
        raise InvalidSpec(f"{where}: must be a list of rung counts, got {raw!r}")
    if len(raw) > MAX_BRACKETS:
        raise InvalidSpec(f"{where}: at most {MAX_BRACKETS} brackets, got {len(raw)}")
    counts = []
    for index, item in enumerate(raw):
        count = as_int(item, f"{where}[{index}]")
        if count < 1:
            raise InvalidSpec(f"{where}[{index}]: must be >= 1, got {count}")
        if count > max_rungs:
            raise InvalidSpec(f"{where}[{index}]: must be <= max_rungs ({max_rungs}), got {count}")
        counts.append(count)
    return tuple(counts)


def adaptive_config(searcher: Mapping[str, Any], path: str = "searcher") -> AdaptiveConfig:
    goal = objective(searcher, path)
    max_trials = _max_trials(searcher, path)
    time = time_budget(searcher, path)
    mode = str_field(searcher, "mode", path, default=DEFAULT_MODE)
    if mode not in ADAPTIVE_MODES:
        raise InvalidSpec(f"{path}.mode: must be one of {', '.join(ADAPTIVE_MODES)}, got {mode!r}")
    max_rungs = _rung_count(searcher, "max_rungs", path, DEFAULT_MAX_RUNGS)
    return AdaptiveConfig(
        objective=goal,
        time=time,
        divisor=divisor(searcher, path),
        max_trials=max_trials,
        max_concurrent_trials=max_concurrent_trials(searcher, path),
        mode=mode,
        max_rungs=max_rungs,
        bracket_rungs=_bracket_rungs(searcher, path, max_rungs),
    )
