"""Stopping ASHA (`stop_once: true`, Determined 0.38's asha_stopping.go): trials train on their own and
the search only decides, at each validation, whether a trial may go on.

The decisions are Determined's; Cairn adds targets so no epoch is trained in vain. Every trial is
created with rung 0's length as its target, and a trial that goes on past a rung gets the next rung's
length (SetTrialTarget). Code that follows `core.searcher.operations()` trains to a rung, reports and
learns the verdict before it trains further, instead of training on while a stop is on its way (with
two epochs where one was needed at the bottom rung, stopping ASHA spent up to twice its budget there).
Code that trains to max_time on its own and polls `should_preempt()` ignores the targets and is
stopped as in Determined.

A validation reports the searcher metric and how far the trial has trained. From the trial's current
rung upwards, every rung whose length the trial has reached takes its result; the trial goes on only
while it ranks in the top max(1, floor(n / divisor)) of each such rung, and is stopped at the top rung.
Each stop creates a replacement while fewer than max_trials valid trials were created, which keeps
the number of trials at work constant.

Early exits: a trial with invalid hyperparameters leaves every rung and does not count against
max_trials (it is replaced); any other early exit ranks last at its current rung and is replaced if the
budget allows.

Where Determined has no rule, this search ignores what arrives from a trial it already stopped or that
exited early (a late validation, an exit racing the stop), so a trial is ranked and replaced at most
once.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Set
from typing import Any

from cairn.searcher_plugin.actions import Action, CreateTrial, SetTrialTarget, StopTrial
from cairn.searcher_plugin.events import ExitReason
from services.common.logging import get_logger
from services.searcher.domain.method import SearchContext, SearchMethod, TrialPlan
from services.searcher.domain.methods.halving_config import HalvingConfig
from services.searcher.domain.methods.halving_rungs import (
    WORST_METRIC,
    halving_progress,
    power,
    read_validation,
    rung_lengths,
    top_count,
)
from services.searcher.domain.methods.halving_state import (
    Rung,
    RungEntry,
    new_rungs,
    read_id_set,
    read_trial_rungs,
    rungs_from_state,
    rungs_to_state,
)
from services.searcher.domain.state_fields import read_int

log = get_logger(__name__)


def _insert(rung: Rung, request_id: str, metric: float) -> int:
    """Insert before any equal result (Determined's sort.Search on >=); returns the rank."""
    index = bisect.bisect_left(rung.entries, metric, key=lambda e: e.metric)
    rung.entries.insert(index, RungEntry(request_id, metric))
    return index


class StoppingHalving(SearchMethod):
    def __init__(self, config: HalvingConfig) -> None:
        self.config = config
        self.lengths = rung_lengths(config.time.max_time, config.divisor, config.num_rungs)
        self.rungs = new_rungs(self.lengths)
        # Every trial this search created → the rung it is heading for (or was stopped at).
        self.trial_rungs: dict[str, int] = {}
        self.stopped: set[str] = set()
        self.early_exits: set[str] = set()
        self.trials_completed = 0
        self.invalid_trials = 0

    # --- decisions ------------------------------------------------------------------------------

    def _create(self, ctx: SearchContext) -> CreateTrial:
        action = ctx.create_trial(ctx.sample(), target_length=self.lengths[0])
        self.trial_rungs[action.request_id] = 0
        return action

    def _budget_left(self) -> bool:
        return len(self.trial_rungs) - self.invalid_trials < self.config.max_trials

    def initial_trials(self, ctx: SearchContext) -> list[Action]:
        config = self.config
        if config.max_concurrent_trials > 0:
            count = min(config.max_concurrent_trials, config.max_trials)
        else:
            # Enough trials that one can reach the top rung, within max_trials.
            enough = power(config.divisor, config.num_rungs - 1)
            count = config.max_trials if enough >= config.max_trials else max(1, int(enough))
        return [self._create(ctx) for _ in range(count)]

    def validation_completed(
        self, ctx: SearchContext, request_id: str, metrics: Mapping[str, Any], steps_completed: int
    ) -> list[Action]:
        if request_id in self.stopped or request_id in self.early_exits:
            log.debug("validation of a trial already decided on, ignored", request_id=request_id)
            return []
        reading = read_validation(metrics, steps_completed, self.config.objective, self.config.time)
        if reading is None:
            log.debug(
                "validation without the searcher metric or time metric, ignored",
                request_id=request_id,
                metric=self.config.objective.metric,
                time_metric=self.config.time.unit,
            )
            return []
        actions: list[Action] = []
        top = len(self.rungs) - 1
        passed = False
        # One validation can pass several rungs: trials report when they like.
        for index in range(self.trial_rungs[request_id], len(self.rungs)):
            self.trial_rungs[request_id] = index
            rung = self.rungs[index]
            if reading.time < rung.units_needed:
                break
            rank = _insert(rung, request_id, reading.metric)
            if index == top or rank >= max(1, top_count(len(rung.entries), self.config.divisor)):
                self.stopped.add(request_id)
                actions.append(StopTrial(request_id))
                break
            passed = True
        if actions and self._budget_left():
            actions.append(self._create(ctx))
        if passed and not actions:
            # It goes on: to the rung it now heads for (the loop left trial_rungs there).
            actions.append(SetTrialTarget(request_id, self.lengths[self.trial_rungs[request_id]]))
        return actions

    def trial_exited_early(self, ctx: SearchContext, request_id: str, reason: ExitReason) -> list[Action]:
        if reason.invalid_hp:
            self.early_exits.add(request_id)
            self.invalid_trials += 1
            for rung in self.rungs[: self.trial_rungs[request_id] + 1]:
                rung.remove(request_id)
            # The invalid trial gave back its place in max_trials, so a replacement always fits.
            return [StopTrial(request_id), self._create(ctx)]
        already_decided = request_id in self.stopped
        self.early_exits.add(request_id)
        if already_decided:
            return []
        _insert(self.rungs[self.trial_rungs[request_id]], request_id, WORST_METRIC)
        return [self._create(ctx)] if self._budget_left() else []

    def trial_exited(self, ctx: SearchContext, request_id: str) -> list[Action]:
        self.trials_completed += 1
        return []

    def progress(self, trial_progress: Mapping[str, float], trials_closed: Set[str]) -> float:
        return halving_progress(
            len(self.rungs[0].entries), self.trials_completed, self.invalid_trials, self.config.max_trials
        )

    # --- state ----------------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {
            "rungs": rungs_to_state(self.rungs),
            "trial_rungs": dict(sorted(self.trial_rungs.items())),
            "stopped": sorted(self.stopped),
            "early_exits": sorted(self.early_exits),
            "trials_completed": self.trials_completed,
            "invalid_trials": self.invalid_trials,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        path = "method_state"
        self.trial_rungs = read_trial_rungs(state, path, len(self.lengths))
        known = self.trial_rungs.keys()
        self.rungs = rungs_from_state(state, path, self.lengths, known)
        self.stopped = read_id_set(state, "stopped", path, known)
        self.early_exits = read_id_set(state, "early_exits", path, known)
        self.trials_completed = read_int(state, "trials_completed", path)
        self.invalid_trials = read_int(state, "invalid_trials", path)

    # --- preview --------------------------------------------------------------------------------

    def length_unit(self) -> str:
        return self.config.time.unit

    def trial_plan(self, request_id: str) -> TrialPlan:
        return TrialPlan(rungs=self.lengths)
