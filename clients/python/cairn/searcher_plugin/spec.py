"""What the master sends of an experiment's configuration: the `searcher` section (with the
master's defaults filled in, and any fields of the searcher's own passed through), the expanded
`hyperparameters` section, and the experiment seed."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.searcher_plugin.errors import InvalidSpec

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
    def from_json(cls, raw: Any, path: str = "spec") -> SearchSpec:
        """The spec `to_json` gave, as a snapshot holds it; InvalidSpec when it is not one."""
        if not isinstance(raw, Mapping):
            raise InvalidSpec(f"{path}: must hold searcher and hyperparameters mappings and an integer seed")
        searcher, hparams, seed = raw.get("searcher"), raw.get("hyperparameters"), raw.get("seed")
        if not isinstance(searcher, dict) or not isinstance(hparams, dict) or not isinstance(seed, int):
            raise InvalidSpec(f"{path}: must hold searcher and hyperparameters mappings and an integer seed")
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
