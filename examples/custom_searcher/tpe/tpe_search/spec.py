"""What the master sends of an experiment's configuration: the `searcher` section, the expanded
`hyperparameters` section and the experiment seed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidArgument


@dataclass(frozen=True)
class SearchSpec:
    searcher: dict[str, Any] = field(default_factory=dict)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"searcher": self.searcher, "hyperparameters": self.hyperparameters, "seed": self.seed}

    @classmethod
    def from_json(cls, raw: Any, path: str) -> SearchSpec:
        if not isinstance(raw, Mapping):
            raise InvalidArgument(f"{path}: must be a mapping")
        searcher, hparams, seed = raw.get("searcher"), raw.get("hyperparameters"), raw.get("seed")
        if not isinstance(searcher, dict) or not isinstance(hparams, dict):
            raise InvalidArgument(f"{path}: must hold the searcher and hyperparameters mappings")
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
            raise InvalidArgument(f"{path}.seed: must be an integer in [0, 2**32), got {seed!r}")
        return cls(searcher=searcher, hyperparameters=hparams, seed=seed)

    def canonical(self) -> str:
        """One text per spec, to tell a retried start from a different one."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
