"""`random` and `single` search (Determined's random.go).

Random starts min(max_trials, max_concurrent_trials) trials (all of them when concurrency is 0) and
creates one more each time a trial exits, until max_trials were created; so concurrency never grows.
A trial that exits for invalid hyperparameters does not count against max_trials and is replaced.
`single` is random with one trial, concurrency one, and no replacement.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

from cairn.searcher_plugin.actions import Action
from cairn.searcher_plugin.events import ExitReason
from cairn.searcher_plugin.fields import int_field
from services.searcher.domain.hyperparameters import HyperparameterSpace
from services.searcher.domain.lengths import Length, legacy_max_length
from services.searcher.domain.method import SearchContext, SearchMethod, TrialPlan, legacy_plan
from services.searcher.domain.methods.common import initial_count, max_concurrent_trials
from services.searcher.domain.state_fields import read_int


@dataclass(frozen=True)
class RandomConfig:
    max_trials: int
    max_concurrent_trials: int
    replace_invalid: bool
    max_length: Length | None


def random_config(searcher: Mapping[str, Any], path: str = "searcher") -> RandomConfig:
    return RandomConfig(
        max_trials=int_field(searcher, "max_trials", path, minimum=1, why=" for random search"),
        max_concurrent_trials=max_concurrent_trials(searcher, path),
        replace_invalid=True,
        max_length=legacy_max_length(searcher, path),
    )


def single_config(searcher: Mapping[str, Any], path: str = "searcher") -> RandomConfig:
    return RandomConfig(
        max_trials=1,
        max_concurrent_trials=1,
        replace_invalid=False,
        max_length=legacy_max_length(searcher, path),
    )


class RandomSearch(SearchMethod):
    def __init__(self, config: RandomConfig) -> None:
        self.config = config
        # Trials created that count against max_trials (invalid-hyperparameter trials do not).
        self.created_trials = 0
        # Trials created and not yet exited.
        self.pending_trials = 0

    def _create(self, ctx: SearchContext) -> Action:
        self.created_trials += 1
        self.pending_trials += 1
        return ctx.create_trial(ctx.sample())

    def initial_trials(self, ctx: SearchContext) -> list[Action]:
        count = initial_count(self.config.max_trials, self.config.max_concurrent_trials)
        return [self._create(ctx) for _ in range(count)]

    def trial_exited_early(self, ctx: SearchContext, request_id: str, reason: ExitReason) -> list[Action]:
        if reason.invalid_hp and self.config.replace_invalid:
            # The replacement is created when the trial's exit arrives, keeping one create per exit.
            self.created_trials -= 1
        return []

    def trial_exited(self, ctx: SearchContext, request_id: str) -> list[Action]:
        self.pending_trials -= 1
        if self.created_trials < self.config.max_trials:
            return [self._create(ctx)]
        return []

    def progress(self, trial_progress: Mapping[str, float], trials_closed: Set[str]) -> float:
        # Determined's measure: the mean over created trials (invalid-hyperparameter ones dropped) of
        # 1 for a closed trial and its reported fraction otherwise.
        if not trial_progress:
            return 0.0
        done = sum(1.0 if rid in trials_closed else value for rid, value in trial_progress.items())
        return done / len(trial_progress)

    def to_state(self) -> dict[str, Any]:
        return {"created_trials": self.created_trials, "pending_trials": self.pending_trials}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.created_trials = read_int(state, "created_trials", "method_state")
        self.pending_trials = read_int(state, "pending_trials", "method_state")

    def length_unit(self) -> str:
        return self.config.max_length.unit if self.config.max_length else ""

    def trial_plan(self, request_id: str) -> TrialPlan:
        return legacy_plan(self.config.max_length)


def build_random(searcher: Mapping[str, Any], space: HyperparameterSpace) -> SearchMethod:
    return RandomSearch(random_config(searcher))


def build_single(searcher: Mapping[str, Any], space: HyperparameterSpace) -> SearchMethod:
    return RandomSearch(single_config(searcher))
