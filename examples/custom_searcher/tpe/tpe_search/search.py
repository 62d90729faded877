"""One TPE search: an Optuna study driven by the master's events.

A trial's life, in Optuna's terms:
  created (CreateTrial)        study.ask(distributions): the trial is RUNNING in the study; with
                               Optuna's default constant liar, TPE keeps new suggestions away from it
  ValidationCompleted          remember the latest finite value of `metric` (Optuna takes one value
                               per trial; the last report is the one the trial finished with)
  TrialExitedEarly (any)       told FAILED at once: whatever it reported came from an unfinished run
                               and would mislead the model; INVALID_HP and INIT_INVALID_HP trials
                               also stop counting against max_trials, so the trial that replaces
                               them is created when they exit
  TrialExited                  told COMPLETE with its value, or FAILED if it never reported the
                               metric; then one more trial while fewer than max_trials count, and
                               Shutdown once every trial exited and none is left to create

Reproducibility: every suggestion is made by a fresh TPESampler seeded from the session's generator
(draws.py). A suggestion then depends only on the trials in the study and that seed, not on state
hidden in a long-lived sampler, so a study rebuilt from a snapshot with study.add_trial suggests
exactly what the original would have.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial

from .actions import Action, CreateTrial, Shutdown
from .config import TPEConfig, parse_config
from .draws import draw
from .errors import InvalidArgument
from .events import (
    EVENT_FIELDS,
    Event,
    ExitReason,
    TrialCreated,
    TrialExited,
    TrialExitedEarly,
    TrialProgress,
    ValidationCompleted,
)
from .fields import is_number
from .space import SearchSpace, parse_space
from .spec import SearchSpec

log = logging.getLogger(__name__)


class TrialStatus(enum.Enum):
    RUNNING = "running"  # asked and not told: a pending ask
    COMPLETE = "complete"
    FAILED = "failed"


_OPTUNA_STATES = {
    TrialStatus.RUNNING: TrialState.RUNNING,
    TrialStatus.COMPLETE: TrialState.COMPLETE,
    TrialStatus.FAILED: TrialState.FAIL,
}


@dataclass
class TrialRecord:
    request_id: str
    number: int  # the trial's number in the Optuna study
    params: dict[str, Any]  # Optuna's parameters, by dotted name
    trial_seed: int
    status: TrialStatus = TrialStatus.RUNNING
    value: float | None = None
    # Counts against max_trials (a trial with invalid hyperparameters does not).
    counts: bool = True
    created: bool = False
    exited: bool = False
    exit_reason: ExitReason | None = None


class TPESearch:
    def __init__(self, spec: SearchSpec) -> None:
        """Check the spec (InvalidArgument naming the field) and open an empty study."""
        self.spec = spec
        self.config: TPEConfig = parse_config(spec.searcher)
        self.space: SearchSpace = parse_space(spec.hyperparameters)
        self.draws = 0
        self.trials: list[TrialRecord] = []
        self._by_id: dict[str, TrialRecord] = {}
        self.shutdown = False
        direction = StudyDirection.MINIMIZE if self.config.smaller_is_better else StudyDirection.MAXIMIZE
        self.study = optuna.create_study(direction=direction, sampler=self._sampler(spec.seed))

    def _sampler(self, seed: int) -> optuna.samplers.TPESampler:
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.config.n_startup_trials)

    # --- driving -------------------------------------------------------------------------------

    def initial_trials(self) -> list[Action]:
        return [self.suggest() for _ in range(self.config.initial_trials())]

    def suggest(self) -> CreateTrial:
        """Ask the study for one more trial."""
        chosen = draw(self.spec.seed, self.draws)
        self.draws += 1
        self.study.sampler = self._sampler(chosen.sampler_seed)
        trial = self.study.ask(self.space.distributions())
        record = TrialRecord(chosen.request_id, trial.number, dict(trial.params), chosen.trial_seed)
        self._add(record)
        return CreateTrial(record.request_id, self.space.hparams(record.params), record.trial_seed)

    def apply(self, event: Event) -> list[Action]:
        record = self._trial_for(event)
        if isinstance(event, TrialCreated):
            record.created = True
        elif isinstance(event, ValidationCompleted):
            self._remember_value(record, event.metrics)
        elif isinstance(event, TrialExitedEarly):
            self._exit_early(record, event.reason)
        elif isinstance(event, TrialExited):
            return self._exit(record)
        else:
            # TrialProgress: the search's progress counts exited trials, not fractions of live ones.
            assert isinstance(event, TrialProgress)
        return []

    def progress(self) -> float:
        exited = sum(1 for t in self.trials if t.exited and t.counts)
        return min(1.0, exited / self.config.max_trials)

    # --- events --------------------------------------------------------------------------------

    def _trial_for(self, event: Event) -> TrialRecord:
        where = f"event.{EVENT_FIELDS[type(event)]}.request_id"
        if not event.request_id:
            raise InvalidArgument(f"{where}: required")
        record = self._by_id.get(event.request_id)
        if record is None:
            raise InvalidArgument(f"{where}: no trial '{event.request_id}' was created by this search")
        return record

    def _remember_value(self, record: TrialRecord, metrics: Mapping[str, Any]) -> None:
        if record.status is not TrialStatus.RUNNING:
            return  # told already: Optuna's value for it is fixed
        value: Any = metrics.get(self.config.metric)
        if not is_number(value) or not math.isfinite(value):
            # A NaN would make Optuna fail the trial; keep the last usable value instead.
            log.info(
                "validation without a usable value request_id=%s metric=%s value=%r",
                record.request_id,
                self.config.metric,
                value,
            )
            return
        record.value = float(value)

    def _exit_early(self, record: TrialRecord, reason: ExitReason) -> None:
        if record.exited or record.exit_reason is not None:
            return  # a repeat changes nothing
        record.exit_reason = reason
        if reason.invalid_hp:
            record.counts = False
        if record.status is TrialStatus.RUNNING:
            self._tell(record, None)

    def _exit(self, record: TrialRecord) -> list[Action]:
        if record.exited:
            return []
        record.exited = True
        if record.status is TrialStatus.RUNNING:
            self._tell(record, record.value)
        actions: list[Action] = []
        if self.shutdown:
            return actions
        if sum(1 for t in self.trials if t.counts) < self.config.max_trials:
            actions.append(self.suggest())
        elif all(t.exited for t in self.trials):
            actions.append(self._shut_down())
        return actions

    def _tell(self, record: TrialRecord, value: float | None) -> None:
        if value is None:
            self.study.tell(record.number, state=TrialState.FAIL)
            record.status = TrialStatus.FAILED
        else:
            self.study.tell(record.number, value)
            record.status = TrialStatus.COMPLETE
        log.debug("trial told request_id=%s status=%s value=%s", record.request_id, record.status, value)

    def _shut_down(self) -> Shutdown:
        self.shutdown = True
        reasons = [t.exit_reason for t in self.trials]
        return Shutdown(
            cancel=all(r is ExitReason.USER_CANCELED for r in reasons),
            failure=all(r is ExitReason.ERRORED for r in reasons),
        )

    # --- rebuilding from a snapshot ---------------------------------------------------------------

    def _add(self, record: TrialRecord) -> None:
        if record.request_id in self._by_id:
            raise AssertionError(f"request id {record.request_id} drawn twice")
        self.trials.append(record)
        self._by_id[record.request_id] = record

    def load(self, draws: int, trials: list[TrialRecord], shutdown: bool) -> None:
        """Fill a new search's study with the trials of a snapshot (checked by the caller), in the
        order they were asked so that every trial keeps its number."""
        assert not self.trials, "load() is for a search that has asked nothing yet"
        distributions = self.space.distributions()
        for record in trials:
            frozen = create_trial(
                state=_OPTUNA_STATES[record.status],
                value=record.value if record.status is TrialStatus.COMPLETE else None,
                params=record.params,
                distributions=distributions,
            )
            self.study.add_trial(frozen)
            self._add(record)
        self.draws = draws
        self.shutdown = shutdown
