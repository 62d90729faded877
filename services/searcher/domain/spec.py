"""What a search needs of the experiment configuration: the `searcher` section (defaults filled in
by the master), the `hyperparameters` section as written, and the experiment seed."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.searcher.domain.errors import InvalidSpec
from services.searcher.domain.fields import as_int

LENGTH_UNITS = ("batches", "records", "epochs")
# A bare-int legacy length names no unit; Determined counts it in batches.
DEFAULT_LENGTH_UNIT = "batches"
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class SearchSpec:
    searcher: dict[str, Any] = field(default_factory=dict)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.seed <= MAX_SEED:
            raise InvalidSpec(f"seed: must be in [0, 2**32), got {self.seed}")
        # YAML can spell .nan and .inf; a snapshot (JSON) cannot hold them.
        _check_finite(self.searcher, "searcher")
        _check_finite(self.hyperparameters, "hyperparameters")

    def to_json(self) -> dict[str, Any]:
        return {"searcher": self.searcher, "hyperparameters": self.hyperparameters, "seed": self.seed}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SearchSpec:
        searcher, hparams, seed = raw.get("searcher"), raw.get("hyperparameters"), raw.get("seed")
        if not isinstance(searcher, dict) or not isinstance(hparams, dict) or not isinstance(seed, int):
            raise InvalidSpec("spec: must hold searcher and hyperparameters mappings and an integer seed")
        return cls(searcher=searcher, hyperparameters=hparams, seed=seed)

    def canonical(self) -> str:
        """One text per spec, to tell a retried start from a different one."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))


def _check_finite(value: Any, path: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidSpec(f"{path}: must be a finite number, got {value}")
    if isinstance(value, Mapping):
        for key, item in value.items():
            _check_finite(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_finite(item, f"{path}[{index}]")


@dataclass(frozen=True)
class Length:
    """A legacy `max_length`: how far each trial trains, in `unit`."""

    unit: str
    units: int


def legacy_max_length(searcher: Mapping[str, Any], path: str = "searcher") -> Length | None:
    """`max_length` (deprecated in 0.38): a bare int, or exactly one of {batches|records|epochs: N}."""
    raw = searcher.get("max_length")
    if raw is None:
        return None
    where = f"{path}.max_length"
    if isinstance(raw, Mapping):
        keys = sorted(raw)
        if len(keys) != 1 or keys[0] not in LENGTH_UNITS:
            raise InvalidSpec(
                f"{where}: must be an integer or one of {{batches: N}}, {{records: N}}, {{epochs: N}}"
            )
        unit = keys[0]
        units = as_int(raw[unit], f"{where}.{unit}")
    else:
        unit = DEFAULT_LENGTH_UNIT
        units = as_int(raw, where)
    if units < 0:
        raise InvalidSpec(f"{where}: must be >= 0, got {units}")
    return Length(unit, units)
