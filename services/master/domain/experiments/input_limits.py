"""How much one experiment config may make the master store and create: field sizes (the same
limits as edits after creation, experiment_edits.py) and the number of trials its search asks for
(the master's max_trials_per_experiment). Checked on the expanded config, before anything is stored
or any search session opens."""

from __future__ import annotations

from typing import Any

from services.master.domain.config import grid_size
from services.master.domain.experiments.experiment_edits import (
    MAX_DESCRIPTION_CHARS,
    MAX_NAME_CHARS,
    checked_labels,
)
from services.master.domain.kernel.errors import InvalidArgument

# A hyperparameter's name is a key in every trial's hparams, shown in tables and used as a metric
# column; 255 is far beyond real names and matches the label limit.
MAX_HPARAM_NAME_CHARS = 255

# Searchers whose `max_trials` is the number of trials they create.
_COUNTED_BY_MAX_TRIALS = ("random", "adaptive_asha", "async_halving")


def _check_text(config: dict[str, Any], field: str, limit: int) -> None:
    value = config.get(field)
    if isinstance(value, str) and len(value) > limit:
        raise InvalidArgument(f"{field}: at most {limit} characters (got {len(value)})")


def _check_hparam_names(hparams: Any, path: str) -> None:
    if not isinstance(hparams, dict):
        return
    for name, spec in hparams.items():
        if len(name) > MAX_HPARAM_NAME_CHARS:
            raise InvalidArgument(
                f"{path}: the name {name[:32]!r}… has {len(name)} characters, over {MAX_HPARAM_NAME_CHARS}"
            )
        if isinstance(spec, dict) and "type" not in spec:
            _check_hparam_names(spec, f"{path}.{name}")


def trial_count(config: dict[str, Any]) -> tuple[str, int] | None:
    """(field, how many trials the config's search creates), or None when the searcher decides
    that itself (single: one; custom: its own). A grid's size is a product of counts, computed
    without building the grid."""
    searcher = config.get("searcher") or {}
    name = searcher.get("name")
    if name in _COUNTED_BY_MAX_TRIALS and isinstance(searcher.get("max_trials"), int):
        return "searcher.max_trials", int(searcher["max_trials"])
    if name == "grid":
        try:
            return "hyperparameters", grid_size(config.get("hyperparameters") or {})
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
    return None


def check_experiment_limits(config: dict[str, Any], max_trials: int) -> None:
    """Refuse an expanded config that would store oversized fields or create more than
    `max_trials` trials, naming the field."""
    _check_text(config, "name", MAX_NAME_CHARS)
    _check_text(config, "description", MAX_DESCRIPTION_CHARS)
    labels = config.get("labels")
    if isinstance(labels, list):
        checked_labels(labels)
    _check_hparam_names(config.get("hyperparameters"), "hyperparameters")
    counted = trial_count(config)
    if counted is not None and counted[1] > max_trials:
        field, count = counted
        what = "the grid has" if field == "hyperparameters" else "asks for"
        raise InvalidArgument(
            f"{field}: {what} {count} trials, over this cluster's limit of {max_trials} per experiment "
            "(the master's --max-trials-per-experiment)"
        )
