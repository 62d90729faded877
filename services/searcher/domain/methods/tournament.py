"""Several searches run side by side as one (Determined's tournament.go): each trial belongs to the
sub-search that created it, which alone hears of it again. Progress is the sub-searches' mean."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence, Set
from typing import Any

from cairn.searcher_plugin.actions import Action, CreateTrial
from cairn.searcher_plugin.errors import InvalidSnapshot
from cairn.searcher_plugin.events import ExitReason
from services.searcher.domain.method import SearchContext, SearchMethod, TrialPlan
from services.searcher.domain.state_fields import read_mapping


class TournamentSearch(SearchMethod):
    def __init__(self, subsearches: Sequence[SearchMethod]) -> None:
        if not subsearches:
            raise ValueError("a tournament needs at least one sub-search")
        self.subsearches = list(subsearches)
        # request id → index of the sub-search that created the trial.
        self.trial_table: dict[str, int] = {}

    def _claim(self, index: int, actions: list[Action]) -> list[Action]:
        for action in actions:
            if isinstance(action, CreateTrial):
                self.trial_table[action.request_id] = index
        return actions

    def _owner(self, request_id: str) -> tuple[int, SearchMethod]:
        index = self.trial_table[request_id]
        return index, self.subsearches[index]

    def initial_trials(self, ctx: SearchContext) -> list[Action]:
        actions: list[Action] = []
        for index, sub in enumerate(self.subsearches):
            actions += self._claim(index, sub.initial_trials(ctx))
        return actions

    def trial_created(self, ctx: SearchContext, request_id: str) -> list[Action]:
        index, sub = self._owner(request_id)
        return self._claim(index, sub.trial_created(ctx, request_id))

    def validation_completed(
        self, ctx: SearchContext, request_id: str, metrics: Mapping[str, Any], steps_completed: int
    ) -> list[Action]:
        index, sub = self._owner(request_id)
        return self._claim(index, sub.validation_completed(ctx, request_id, metrics, steps_completed))

    def trial_exited_early(self, ctx: SearchContext, request_id: str, reason: ExitReason) -> list[Action]:
        index, sub = self._owner(request_id)
        return self._claim(index, sub.trial_exited_early(ctx, request_id, reason))

    def trial_exited(self, ctx: SearchContext, request_id: str) -> list[Action]:
        index, sub = self._owner(request_id)
        return self._claim(index, sub.trial_exited(ctx, request_id))

    def progress(self, trial_progress: Mapping[str, float], trials_closed: Set[str]) -> float:
        total = 0.0
        for index, sub in enumerate(self.subsearches):
            own_progress = {rid: v for rid, v in trial_progress.items() if self.trial_table.get(rid) == index}
            own_closed = {rid for rid in trials_closed if self.trial_table.get(rid) == index}
            total += sub.progress(own_progress, own_closed)
        return total / len(self.subsearches)

    def to_state(self) -> dict[str, Any]:
        return {
            "trial_table": dict(sorted(self.trial_table.items())),
            "subsearches": [sub.to_state() for sub in self.subsearches],
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        table = read_mapping(state, "trial_table", "method_state")
        count = len(self.subsearches)
        for rid, index in table.items():
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
                raise InvalidSnapshot(
                    f"method_state.trial_table.{rid}: must be a bracket index in [0, {count})"
                )
        states = state.get("subsearches")
        if not isinstance(states, list) or len(states) != count:
            raise InvalidSnapshot(f"method_state.subsearches: must be a list of {count} states")
        for index, (sub, sub_state) in enumerate(zip(self.subsearches, states, strict=True)):
            if not isinstance(sub_state, Mapping):
                raise InvalidSnapshot(f"method_state.subsearches[{index}]: must be an object")
            try:
                sub.load_state(sub_state)
            except InvalidSnapshot as exc:
                raise InvalidSnapshot(f"method_state.subsearches[{index}]: {exc}") from None
        self.trial_table = dict(table)

    def length_unit(self) -> str:
        return self.subsearches[0].length_unit()

    def trial_plan(self, request_id: str) -> TrialPlan:
        index, sub = self._owner(request_id)
        return dataclasses.replace(sub.trial_plan(request_id), bracket=index)
