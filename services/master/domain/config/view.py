"""A typed, read-only view of an expanded configuration, for master code that reads single fields."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from services.master.domain.config.schema import DEVICE_FLAVOURS

# Searchers whose trial count is fixed by the config's max_trials (grid's comes from its grid).
_MAX_TRIALS_SEARCHERS = ("random", "adaptive_asha", "async_halving", "custom")


def _entrypoint(value: Any) -> tuple[list[str], bool]:
    # A string runs through `sh -c`, a list is executed as given (as Determined's launcher does).
    if isinstance(value, str):
        return [value], True
    if isinstance(value, list):
        return [str(part) for part in value], False
    return [], False


def _environment_variables(value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        value = value.get("cpu") or []  # per-flavour lists: Cairn's runtimes run the cpu flavour
    variables: dict[str, str] = {}
    for item in value or []:
        key, _, text = str(item).partition("=")
        variables[key] = text
    return variables


def _image(value: Any) -> str | None:
    if isinstance(value, dict):
        for flavour in DEVICE_FLAVOURS:
            if value.get(flavour):
                return str(value[flavour])
        return None
    return str(value) if value else None


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class ExperimentConfigView:
    name: str
    description: str
    labels: list[str]
    entrypoint: list[str]
    entrypoint_is_shell: bool
    searcher: dict[str, Any]
    searcher_name: str
    searcher_metric: str
    smaller_is_better: bool
    max_trials: int | None
    hyperparameters: dict[str, Any]
    slots_per_trial: int
    resource_pool: str
    priority: int | None
    weight: float
    max_slots: int | None
    max_restarts: int
    checkpoint_storage: dict[str, Any]
    environment_variables: dict[str, str]
    image: str | None
    experiment_seed: int
    preemption_timeout: int | None
    data: dict[str, Any]

    @classmethod
    def from_expanded(cls, cfg: dict[str, Any]) -> ExperimentConfigView:
        """The view of a config returned by expand_config (copies: the view shares nothing with it)."""
        searcher = cfg.get("searcher") or {}
        resources = cfg.get("resources") or {}
        environment = cfg.get("environment") or {}
        entrypoint, shell = _entrypoint(cfg.get("entrypoint"))
        name = str(searcher.get("name", ""))
        max_trials = searcher.get("max_trials") if name in _MAX_TRIALS_SEARCHERS else None
        if isinstance(max_trials, bool) or not isinstance(max_trials, int):
            max_trials = None  # a custom searcher's fields are free-form
        return cls(
            name=str(cfg.get("name") or ""),
            description=str(cfg.get("description") or ""),
            labels=[str(label) for label in cfg.get("labels") or []],
            entrypoint=entrypoint,
            entrypoint_is_shell=shell,
            searcher=copy.deepcopy(searcher),
            searcher_name=name,
            searcher_metric=str(searcher.get("metric", "")),
            smaller_is_better=bool(searcher.get("smaller_is_better", True)),
            max_trials=_optional_int(max_trials),
            hyperparameters=copy.deepcopy(cfg.get("hyperparameters") or {}),
            slots_per_trial=int(resources.get("slots_per_trial", 1)),
            resource_pool=str(resources.get("resource_pool") or ""),
            priority=_optional_int(resources.get("priority")),
            weight=float(resources.get("weight", 1)),
            max_slots=_optional_int(resources.get("max_slots")),
            max_restarts=int(cfg.get("max_restarts", 5)),
            checkpoint_storage=copy.deepcopy(cfg.get("checkpoint_storage") or {}),
            environment_variables=_environment_variables(environment.get("environment_variables")),
            image=_image(environment.get("image")),
            experiment_seed=int((cfg.get("reproducibility") or {}).get("experiment_seed", 0)),
            preemption_timeout=_optional_int(cfg.get("preemption_timeout")),
            data=copy.deepcopy(cfg.get("data") or {}),
        )
