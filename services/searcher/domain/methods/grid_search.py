"""`grid` search (Determined's grid.go): one trial per grid point, handed out from the last point
backwards, at most max_concurrent_trials at a time (0: all at once), the next one as a trial exits.
A trial that exits for invalid hyperparameters is not retried: its point is done."""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

from cairn.searcher_plugin.actions import Action
from cairn.searcher_plugin.errors import InvalidSnapshot
from services.searcher.domain.grid import Grid
from services.searcher.domain.hyperparameters import HyperparameterSpace
from services.searcher.domain.lengths import Length, legacy_max_length
from services.searcher.domain.method import SearchContext, SearchMethod, TrialPlan, legacy_plan
from services.searcher.domain.methods.common import initial_count, max_concurrent_trials
from services.searcher.domain.state_fields import read_int


@dataclass(frozen=True)
class GridConfig:
    max_concurrent_trials: int
    max_length: Length | None


def grid_config(searcher: Mapping[str, Any], path: str = "searcher") -> GridConfig:
    return GridConfig(max_concurrent_trials(searcher, path), legacy_max_length(searcher, path))


class GridSearch(SearchMethod):
    def __init__(self, config: GridConfig, grid: Grid) -> None:
        self.config = config
        self.grid = grid
        # Points handed out so far; the next trial gets point size - 1 - handed_out.
        self.handed_out = 0
        self.pending_trials = 0

    def _next(self, ctx: SearchContext) -> Action:
        hparams = self.grid.point(self.grid.size - 1 - self.handed_out)
        self.handed_out += 1
        self.pending_trials += 1
        return ctx.create_trial(hparams)

    def initial_trials(self, ctx: SearchContext) -> list[Action]:
        count = initial_count(self.grid.size, self.config.max_concurrent_trials)
        return [self._next(ctx) for _ in range(count)]

    def trial_exited(self, ctx: SearchContext, request_id: str) -> list[Action]:
        self.pending_trials -= 1
        if self.handed_out < self.grid.size:
            return [self._next(ctx)]
        return []

    def progress(self, trial_progress: Mapping[str, float], trials_closed: Set[str]) -> float:
        # Every grid point counts once: closed trials (invalid ones included) as done, live trials
        # by their reported fraction, points not yet handed out as nothing.
        done = len(trials_closed) + sum(v for rid, v in trial_progress.items() if rid not in trials_closed)
        return done / self.grid.size

    def to_state(self) -> dict[str, Any]:
        return {
            "grid_size": self.grid.size,
            "handed_out": self.handed_out,
            "pending_trials": self.pending_trials,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        size = read_int(state, "grid_size", "method_state")
        if size != self.grid.size:
            raise InvalidSnapshot(
                f"method_state.grid_size: the snapshot's grid has {size} points, the spec's {self.grid.size}"
            )
        handed_out = read_int(state, "handed_out", "method_state")
        if handed_out > size:
            raise InvalidSnapshot(f"method_state.handed_out: {handed_out} exceeds the grid's {size} points")
        self.handed_out = handed_out
        self.pending_trials = read_int(state, "pending_trials", "method_state")

    def length_unit(self) -> str:
        return self.config.max_length.unit if self.config.max_length else ""

    def trial_plan(self, request_id: str) -> TrialPlan:
        return legacy_plan(self.config.max_length)


def build_grid(searcher: Mapping[str, Any], space: HyperparameterSpace) -> SearchMethod:
    config = grid_config(searcher)
    return GridSearch(config, Grid.build(space))
