"""Expanding a configuration: the full config with every default written out, as the master stores it.

Three defaults are not the schema's to give but the master's, passed in as ConfigDefaults: the
checkpoint storage used when the config names none, the pool that `resource_pool: ""` means, and
the experiment seed (Determined uses the creation time).

An experiment without a name is called "experiment-<8 hex digits>" (random), the same shape the
master uses for other generated names; Determined's "Experiment (<three words>)" would need a word
list for no gain.

Hyperparameters are written out in Determined's expanded form: a bare value `lr: 0.1` becomes
`{type: const, val: 0.1}`, so consumers see one shape per hyperparameter (nested groups stay groups).
"""

from __future__ import annotations

import copy
import secrets
from dataclasses import dataclass
from typing import Any

from services.master.domain.config.errors import ConfigError
from services.master.domain.config.schema import EXPERIMENT_SCHEMA
from services.master.domain.config.schema_walk import fill_defaults
from services.master.domain.config.validation import SCHEMA_WALKER, normalized, problems_of_normalized


@dataclass
class ConfigDefaults:
    """What the master decides for a config that leaves it open."""

    checkpoint_storage: dict[str, Any]
    resource_pool: str
    experiment_seed: int


def generated_name() -> str:
    return f"experiment-{secrets.token_hex(4)}"


def explicit_hyperparameters(hparams: dict[str, Any]) -> dict[str, Any]:
    """Hyperparameters with every implicit const written as {type: const, val: ...}."""
    result: dict[str, Any] = {}
    for name, spec in hparams.items():
        if not isinstance(spec, dict):
            result[name] = {"type": "const", "val": spec}
        elif "type" not in spec:
            result[name] = explicit_hyperparameters(spec)
        else:
            result[name] = spec
    return result


def _with_default_storage(config: dict[str, Any], default: dict[str, Any]) -> dict[str, Any]:
    """As in Determined, an experiment's checkpoint_storage is merged over the master's: giving only
    the GC fields (or the same type with some fields) keeps the rest of the default storage."""
    storage = config.get("checkpoint_storage")
    if isinstance(storage, dict) and storage.get("type", default.get("type")) == default.get("type"):
        config = {**config, "checkpoint_storage": {**copy.deepcopy(default), **storage}}
    return config


# An unmanaged experiment's code runs outside the cluster: the master starts nothing of it, so its
# config names no entrypoint (Determined's core_v2 sends none).
_NOT_REQUIRED_UNMANAGED = frozenset({"entrypoint: required"})


def expand_config(
    raw: dict[str, Any], defaults: ConfigDefaults, *, unmanaged: bool = False
) -> dict[str, Any]:
    """The configuration with every default filled (JSON data); ConfigError listing every problem.
    `unmanaged`: an unmanaged experiment's, whose code sends null for the keys it leaves open and
    no entrypoint."""
    if not isinstance(raw, dict):
        raise ConfigError(["config: must be a mapping"])
    if unmanaged:
        raw = {key: value for key, value in raw.items() if value is not None}
    config = normalized(raw)
    config = _with_default_storage(config, defaults.checkpoint_storage)
    problems = _problems(config, unmanaged)
    if problems:
        raise ConfigError(problems)

    config.setdefault("name", generated_name())
    config.setdefault("checkpoint_storage", copy.deepcopy(defaults.checkpoint_storage))
    reproducibility = config.setdefault("reproducibility", {})
    reproducibility.setdefault("experiment_seed", defaults.experiment_seed)
    fill_defaults(SCHEMA_WALKER, config, EXPERIMENT_SCHEMA)
    if not config["resources"]["resource_pool"]:
        config["resources"]["resource_pool"] = defaults.resource_pool
    config["hyperparameters"] = explicit_hyperparameters(config["hyperparameters"])

    # What the master supplied must hold too (its default storage, its seed): check the result.
    problems = _problems(normalized(config), unmanaged)
    if problems:
        raise ConfigError(problems)
    return config


def _problems(config: dict[str, Any], unmanaged: bool) -> list[str]:
    problems = problems_of_normalized(config)
    return [p for p in problems if p not in _NOT_REQUIRED_UNMANAGED] if unmanaged else problems
