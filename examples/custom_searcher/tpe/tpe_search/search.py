"""One TPE search: an Optuna study driven by the master's events, as a `Search` of the plug-in kit
(cairn.searcher_plugin), and `TPESearches`, the factory the kit serves.

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

import logging
import math
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial

from cairn.searcher_plugin import (
    Action,
    CreateTrial,
    Event,
    ExitReason,
    InvalidEvent,
    Preview,
    PreviewedTrial,
    Search,
    SearchFactory,
    SearchSpec,
    Shutdown,
    Snapshot,
    TrialCreated,
    TrialExited,
    TrialExitedEarly,
    TrialProgress,
    ValidationCompleted,
)
from cairn.searcher_plugin.events import EVENT_FIELDS
from cairn.searcher_plugin.fields import is_number

from . import state
from .config import TPEConfig, parse_config
from .draws import draw
from .space import SearchSpace, parse_space
from .state import SearchState, TrialRecord, TrialStatus

log = logging.getLogger(__name__)


_OPTUNA_STATES = {
    TrialStatus.RUNNING: TrialState.RUNNING,
    TrialStatus.COMPLETE: TrialState.COMPLETE,
    TrialStatus.FAILED: TrialState.FAIL,
}


class TPESearch(Search):
    method_name = state.METHOD

    def __init__(self, spec: SearchSpec) -> None:
        """Check the spec (InvalidSpec naming the field) and open an empty study."""
        self.spec = spec
        self.config: TPEConfig = parse_config(spec.searcher)
        self.space: SearchSpace = parse_space(spec.hyperparameters)
        # Events applied: the session's seq, kept in the state so that a snapshot whose frame and
        # state disagree is refused.
        self.events = 0
        self.draws = 0
        self.trials: list[TrialRecord] = []
        self._by_id: dict[str, TrialRecord] = {}
        self.shutdown = False
        direction = StudyDirection.MINIMIZE if self.config.smaller_is_better else StudyDirection.MAXIMIZE
        self.study = optuna.create_study(direction=direction, sampler=self._sampler(spec.seed))

    def _sampler(self, seed: int) -> optuna.samplers.TPESampler:
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.config.n_startup_trials)

    # --- driving -------------------------------------------------------------------------------

    def initial_actions(self) -> list[Action]:
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
        actions: list[Action] = []
        if isinstance(event, TrialCreated):
            record.created = True
        elif isinstance(event, ValidationCompleted):
            self._remember_value(record, event.metrics)
        elif isinstance(event, TrialExitedEarly):
            self._exit_early(record, event.reason)
        elif isinstance(event, TrialExited):
            actions = self._exit(record)
        else:
            # TrialProgress: the search's progress counts exited trials, not fractions of live ones.
            assert isinstance(event, TrialProgress)
        self.events += 1
        return actions

    def progress(self) -> float:
        exited = sum(1 for t in self.trials if t.exited and t.counts)
        return min(1.0, exited / self.config.max_trials)

    # --- events --------------------------------------------------------------------------------

    def _trial_for(self, event: Event) -> TrialRecord:
        where = f"event.{EVENT_FIELDS[type(event)]}.request_id"
        if not event.request_id:
            raise InvalidEvent(f"{where}: required")
        record = self._by_id.get(event.request_id)
        if record is None:
            raise InvalidEvent(f"{where}: no trial '{event.request_id}' was created by this search")
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

    # --- state ---------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        return state.encode(SearchState(self.spec, self.events, self.draws, self.shutdown, self.trials))

    @classmethod
    def restored(cls, snapshot: Snapshot) -> TPESearch:
        """The search a snapshot holds: a new search's study filled with the snapshot's trials, in the
        order they were asked so that every trial keeps its number."""
        saved = state.decode(snapshot)
        search = cls(saved.spec)
        distributions = search.space.distributions()
        for record in saved.trials:
            search.space.check_params(record.params, f"snapshot.state.trials[{record.number}].params")
            frozen = create_trial(
                state=_OPTUNA_STATES[record.status],
                value=record.value if record.status is TrialStatus.COMPLETE else None,
                params=record.params,
                distributions=distributions,
            )
            search.study.add_trial(frozen)
            search._add(record)
        search.events = saved.seq
        search.draws = saved.draws
        search.shutdown = saved.shutdown
        return search

    def _add(self, record: TrialRecord) -> None:
        if record.request_id in self._by_id:
            raise AssertionError(f"request id {record.request_id} drawn twice")
        self.trials.append(record)
        self._by_id[record.request_id] = record


class TPESearches(SearchFactory):
    """What the plug-in kit serves: TPE searches, new and restored, and previews."""

    snapshot_version = state.VERSION

    def create(self, spec: SearchSpec) -> TPESearch:
        return TPESearch(spec)

    def restore(self, snapshot: Snapshot) -> TPESearch:
        return TPESearch.restored(snapshot)

    def preview(self, spec: SearchSpec) -> Preview:
        """The first min(max_trials, n_startup_trials) trials. Those are TPE's random start, so they
        depend on no result and a session with the same spec creates exactly these first; every
        later trial depends on the results, so none is shown."""
        search = TPESearch(spec)
        config = search.config
        first = [search.suggest() for _ in range(min(config.max_trials, config.n_startup_trials))]
        length = config.max_length
        lengths = (length.units,) if length else ()
        return Preview(
            [PreviewedTrial(t.request_id, t.hparams, lengths) for t in first], length.unit if length else ""
        )
