"""The `searcher` section of an experiment, as this searcher reads it.

The master passes the section through as written (plus its own defaults, such as `address` or
`plugin`); fields this searcher does not know are left alone, so one config can carry settings for
other tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cairn.searcher_plugin.errors import InvalidSpec
from cairn.searcher_plugin.fields import as_int, bool_field, int_field

DEFAULT_MAX_CONCURRENT_TRIALS = 2
DEFAULT_N_STARTUP_TRIALS = 4
LENGTH_UNITS = ("batches", "records", "epochs")


@dataclass(frozen=True)
class Length:
    """A `max_length`: how far each trial trains (the master tells the trial; the preview shows it)."""

    unit: str
    units: int


@dataclass(frozen=True)
class TPEConfig:
    metric: str
    smaller_is_better: bool
    max_trials: int
    # 0: no limit, every trial at once (as in Determined); TPE then learns nothing, but it is the
    # user's call.
    max_concurrent_trials: int
    # Trials TPE samples at random before it models the results (Optuna's n_startup_trials).
    n_startup_trials: int
    max_length: Length | None

    def initial_trials(self) -> int:
        if self.max_concurrent_trials == 0:
            return self.max_trials
        return min(self.max_trials, self.max_concurrent_trials)


def _metric(section: Mapping[str, Any], path: str) -> str:
    value = section.get("metric")
    if value is None or value == "":
        raise InvalidSpec(f"{path}.metric: required")
    if not isinstance(value, str):
        raise InvalidSpec(f"{path}.metric: must be a metric name, got {value!r}")
    return value


def _max_length(section: Mapping[str, Any], path: str) -> Length | None:
    raw = section.get("max_length")
    if raw is None:
        return None
    where = f"{path}.max_length"
    if isinstance(raw, Mapping):
        if len(raw) != 1 or next(iter(raw)) not in LENGTH_UNITS:
            raise InvalidSpec(f"{where}: must be an integer or one of {{batches|records|epochs: N}}")
        unit = next(iter(raw))
        units = as_int(raw[unit], f"{where}.{unit}")
    else:
        # A bare number counts batches, as in Determined.
        unit, units = "batches", as_int(raw, where)
    if units < 1:
        raise InvalidSpec(f"{where}: must be >= 1, got {units}")
    return Length(unit, units)


def parse_config(section: Mapping[str, Any], path: str = "searcher") -> TPEConfig:
    return TPEConfig(
        metric=_metric(section, path),
        smaller_is_better=bool_field(section, "smaller_is_better", path, default=True),
        max_trials=int_field(section, "max_trials", path, default=None, minimum=1),
        max_concurrent_trials=int_field(
            section, "max_concurrent_trials", path, default=DEFAULT_MAX_CONCURRENT_TRIALS, minimum=0
        ),
        n_startup_trials=int_field(
            section, "n_startup_trials", path, default=DEFAULT_N_STARTUP_TRIALS, minimum=0
        ),
        max_length=_max_length(section, path),
    )
