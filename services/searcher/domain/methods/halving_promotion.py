"""Promotion ASHA (`stop_once: false`): classic asynchronous successive halving (Li et al. 2020, and
Determined's pre-0.38 asha.go), where the search tells each trial how far to train.

Every trial is created to train to rung 0's length. A trial that reaches its target reports, checkpoints
and waits idle (the master keeps it, ready to resume). Its result goes into that rung; then each free
place (at most max_concurrent_trials trials train at once; 0: no limit) gets the next job: first a
promotion — in the highest rung that has one, the best idle trial ranked in the rung's top
floor(n / divisor) and not yet promoted, sent on with SetTrialTarget to the next rung's length — and only
if there is none, a new trial while fewer than max_trials valid trials were created. A trial that
reaches the top rung is done and stopped.

Ranks order results by metric, ties by creation order, so promotions are deterministic. Once no trial
will be created any more, a rung whose results are final (no trial training towards it or below, no
promotion pending below it) can promote nobody else: its idle, unpromoted trials outside the top are
stopped. When every trial has exited the searcher shuts down.

Early exits: invalid hyperparameters take the trial out of every rung and out of max_trials; another
early exit (or an exit before reaching the target) ranks last at the rung the trial was training for.
Either way its place goes to the next job.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Set
from typing import Any

from cairn.searcher_plugin.actions import Action, CreateTrial, SetTrialTarget, StopTrial
from cairn.searcher_plugin.errors import InvalidSnapshot
from cairn.searcher_plugin.events import ExitReason
from services.common.logging import get_logger
from services.searcher.domain.method import SearchContext, SearchMethod, TrialPlan
from services.searcher.domain.methods.halving_config import HalvingConfig
from services.searcher.domain.methods.halving_rungs import (
    WORST_METRIC,
    halving_progress,
    read_validation,
    rung_lengths,
    top_count,
)
from services.searcher.domain.methods.halving_state import (
    RungEntry,
    new_rungs,
    read_id_set,
    read_trial_rungs,
    rungs_from_state,
    rungs_to_state,
)
from services.searcher.domain.state_fields import read_ids, read_int

log = get_logger(__name__)


class PromotionHalving(SearchMethod):
    def __init__(self, config: HalvingConfig) -> None:
        self.config = config
        self.lengths = rung_lengths(config.time.max_time, config.divisor, config.num_rungs)
        self.rungs = new_rungs(self.lengths)
        # Trials in creation order, and each one's place in it (the tie-break).
        self.trials: list[str] = []
        self.order: dict[str, int] = {}
        # The rung each trial trains towards, or reached last.
        self.trial_rungs: dict[str, int] = {}
        # Training towards a target (created or promoted, not there yet).
        self.active: set[str] = set()
        # At a target below the top, waiting to be promoted or stopped.
        self.idle: set[str] = set()
        self.stopped: set[str] = set()
        self.early_exits: set[str] = set()
        self.trials_completed = 0
        self.invalid_trials = 0

    # --- decisions ------------------------------------------------------------------------------

    def _create(self, ctx: SearchContext) -> CreateTrial:
        action = ctx.create_trial(ctx.sample(), target_length=self.lengths[0])
        rid = action.request_id
        self.order[rid] = len(self.trials)
        self.trials.append(rid)
        self.trial_rungs[rid] = 0
        self.active.add(rid)
        return action

    def _budget_left(self) -> bool:
        return len(self.trials) - self.invalid_trials < self.config.max_trials

    def _record(self, request_id: str, rung: int, metric: float) -> None:
        entries = self.rungs[rung].entries
        rank = (metric, self.order[request_id])
        index = bisect.bisect_left(entries, rank, key=lambda e: (e.metric, self.order[e.request_id]))
        entries.insert(index, RungEntry(request_id, metric))

    def _promotable_in(self, rung: int) -> RungEntry | None:
        entries = self.rungs[rung].entries
        for entry in entries[: top_count(len(entries), self.config.divisor)]:
            if not entry.promoted and entry.request_id in self.idle:
                return entry
        return None

    def _next_promotion(self) -> tuple[int, RungEntry] | None:
        for rung in range(len(self.rungs) - 2, -1, -1):
            entry = self._promotable_in(rung)
            if entry is not None:
                return rung, entry
        return None

    def _has_room(self) -> bool:
        limit = self.config.max_concurrent_trials
        return limit == 0 or len(self.active) < limit

    def _fill(self, ctx: SearchContext) -> list[Action]:
        """Give every free place its next job: a promotion if any, else a new trial."""
        actions: list[Action] = []
        while self._has_room():
            found = self._next_promotion()
            if found is not None:
                rung, entry = found
                entry.promoted = True
                rid = entry.request_id
                self.idle.discard(rid)
                self.active.add(rid)
                self.trial_rungs[rid] = rung + 1
                actions.append(SetTrialTarget(rid, self.lengths[rung + 1]))
            elif self._budget_left():
                actions.append(self._create(ctx))
            else:
                break
        return actions + self._close_out()

    def _close_out(self) -> list[Action]:
        """Stop the idle trials of rungs whose results are final and that no promotion will pick."""
        if self._budget_left():
            return []
        actions: list[Action] = []
        for rung in range(len(self.rungs) - 1):
            if any(self.trial_rungs[rid] == rung for rid in self.active):
                break
            entries = self.rungs[rung].entries
            for entry in entries[top_count(len(entries), self.config.divisor) :]:
                rid = entry.request_id
                if not entry.promoted and rid in self.idle:
                    self.idle.discard(rid)
                    self.stopped.add(rid)
                    actions.append(StopTrial(rid))
            # A promotion still waiting for a place would add a result to the next rung.
            if self._promotable_in(rung) is not None:
                break
        return actions

    def initial_trials(self, ctx: SearchContext) -> list[Action]:
        return self._fill(ctx)

    def validation_completed(
        self, ctx: SearchContext, request_id: str, metrics: Mapping[str, Any], steps_completed: int
    ) -> list[Action]:
        if request_id not in self.active:
            log.debug("validation of a trial not training towards a target, ignored", request_id=request_id)
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
        rung = self.trial_rungs[request_id]
        if reading.time < self.lengths[rung]:
            return []  # on its way to the target
        self.active.discard(request_id)
        self._record(request_id, rung, reading.metric)
        actions: list[Action] = []
        if rung == len(self.rungs) - 1:
            self.stopped.add(request_id)
            actions.append(StopTrial(request_id))
        else:
            self.idle.add(request_id)
        return actions + self._fill(ctx)

    def _leave(self, request_id: str, result: float | None) -> None:
        """The trial will train no more; a trial that was training ranks `result` at its rung."""
        if request_id in self.active:
            self.active.discard(request_id)
            if result is not None:
                self._record(request_id, self.trial_rungs[request_id], result)
        self.idle.discard(request_id)

    def trial_exited_early(self, ctx: SearchContext, request_id: str, reason: ExitReason) -> list[Action]:
        self.early_exits.add(request_id)
        if reason.invalid_hp:
            self._leave(request_id, None)
            self.invalid_trials += 1
            for rung in self.rungs:
                rung.remove(request_id)
        else:
            self._leave(request_id, WORST_METRIC)
        return self._fill(ctx)

    def trial_exited(self, ctx: SearchContext, request_id: str) -> list[Action]:
        self.trials_completed += 1
        if request_id not in self.active and request_id not in self.idle:
            return []
        # Ended without the searcher's say (no early-exit reason): it will not train again.
        self._leave(request_id, WORST_METRIC)
        return self._fill(ctx)

    def progress(self, trial_progress: Mapping[str, float], trials_closed: Set[str]) -> float:
        return halving_progress(
            len(self.rungs[0].entries), self.trials_completed, self.invalid_trials, self.config.max_trials
        )

    # --- state ----------------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {
            "rungs": rungs_to_state(self.rungs),
            "trials": list(self.trials),
            "trial_rungs": dict(sorted(self.trial_rungs.items())),
            "active": sorted(self.active),
            "idle": sorted(self.idle),
            "stopped": sorted(self.stopped),
            "early_exits": sorted(self.early_exits),
            "trials_completed": self.trials_completed,
            "invalid_trials": self.invalid_trials,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        path = "method_state"
        trials = read_ids(state, "trials", path)
        order = {rid: index for index, rid in enumerate(trials)}
        if len(order) != len(trials):
            raise InvalidSnapshot(f"{path}.trials: request ids repeat")
        trial_rungs = read_trial_rungs(state, path, len(self.lengths))
        if trial_rungs.keys() != order.keys():
            raise InvalidSnapshot(f"{path}.trial_rungs: must name exactly the trials created")
        self.trials, self.order, self.trial_rungs = trials, order, trial_rungs
        self.rungs = rungs_from_state(state, path, self.lengths, order)
        self.active = read_id_set(state, "active", path, order)
        self.idle = read_id_set(state, "idle", path, order)
        self.stopped = read_id_set(state, "stopped", path, order)
        self.early_exits = read_id_set(state, "early_exits", path, order)
        self.trials_completed = read_int(state, "trials_completed", path)
        self.invalid_trials = read_int(state, "invalid_trials", path)

    # --- preview --------------------------------------------------------------------------------

    def length_unit(self) -> str:
        return self.config.time.unit

    def trial_plan(self, request_id: str) -> TrialPlan:
        return TrialPlan(rungs=self.lengths)
