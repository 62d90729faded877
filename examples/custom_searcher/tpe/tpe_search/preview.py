"""What a configuration would run, without a session: the first min(max_trials, n_startup_trials)
trials. Those are TPE's random start, so they do not depend on any result and a session with the same
spec creates exactly these first; every later trial depends on the results, so none is shown."""

from __future__ import annotations

from dataclasses import dataclass

from .actions import CreateTrial
from .search import TPESearch
from .spec import SearchSpec


@dataclass(frozen=True)
class Preview:
    trials: list[CreateTrial]
    # The length each trial trains to, when the config names a max_length (and its unit).
    lengths: list[int]
    unit: str


def preview(spec: SearchSpec) -> Preview:
    search = TPESearch(spec)
    config = search.config
    trials = [search.suggest() for _ in range(min(config.max_trials, config.n_startup_trials))]
    if config.max_length is None:
        return Preview(trials, [], "")
    return Preview(trials, [config.max_length.units], config.max_length.unit)
