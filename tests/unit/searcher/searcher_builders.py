"""Builders for searcher tests: specs as the servicer sees them (numbers through a Struct, so
floats), and a driver that plays the master's side of a search."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cairn.searcher_plugin.actions import Action, CreateTrial, Shutdown
from cairn.searcher_plugin.events import (
    Event,
    ExitReason,
    TrialCreated,
    TrialExited,
    TrialExitedEarly,
    TrialProgress,
)
from cairn.searcher_plugin.spec import SearchSpec
from cairn.wire import python_to_struct, struct_to_python
from services.searcher.domain.registry import builtin_registry
from services.searcher.domain.searcher import Searcher

REGISTRY = builtin_registry()


def through_struct(values: dict[str, Any]) -> dict[str, Any]:
    return struct_to_python(python_to_struct(values))


def make_spec(searcher: dict[str, Any], hparams: dict[str, Any] | None = None, seed: int = 0) -> SearchSpec:
    return SearchSpec(through_struct(searcher), through_struct(hparams or {}), seed)


def random_spec(
    max_trials: int = 4, concurrency: int = 16, hparams: dict[str, Any] | None = None, seed: int = 0
) -> SearchSpec:
    searcher = {
        "name": "random",
        "metric": "loss",
        "smaller_is_better": True,
        "max_trials": max_trials,
        "max_concurrent_trials": concurrency,
    }
    return make_spec(searcher, hparams if hparams is not None else DEFAULT_HPARAMS, seed)


def grid_spec(hparams: dict[str, Any], concurrency: int = 16, seed: int = 0) -> SearchSpec:
    searcher = {
        "name": "grid",
        "metric": "loss",
        "smaller_is_better": True,
        "max_concurrent_trials": concurrency,
    }
    return make_spec(searcher, hparams, seed)


def single_spec(hparams: dict[str, Any] | None = None, seed: int = 0) -> SearchSpec:
    return make_spec(
        {"name": "single", "metric": "loss"}, hparams if hparams is not None else DEFAULT_HPARAMS, seed
    )


DEFAULT_HPARAMS: dict[str, Any] = {
    "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
    "layers": {"type": "int", "minval": 1, "maxval": 4},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
    "optimizer": {"name": {"type": "categorical", "vals": ["sgd", "adam"]}, "momentum": 0.9},
    "global_batch_size": 32,
}


def creates(actions: Iterable[Action]) -> list[CreateTrial]:
    return [a for a in actions if isinstance(a, CreateTrial)]


def shutdowns(actions: Iterable[Action]) -> list[Shutdown]:
    return [a for a in actions if isinstance(a, Shutdown)]


@dataclass
class MasterDriver:
    """Plays the master against a Searcher: every create becomes a trial at once (trial_created);
    tests choose how running trials end."""

    searcher: Searcher
    running: list[str] = field(default_factory=list)
    created: list[CreateTrial] = field(default_factory=list)
    shutdown: Shutdown | None = None
    max_running_seen: int = 0

    @classmethod
    def start(cls, spec: SearchSpec) -> MasterDriver:
        driver = cls(Searcher.new(spec, REGISTRY))
        driver.take(driver.searcher.initial_actions())
        return driver

    def take(self, actions: list[Action]) -> list[Action]:
        for action in actions:
            if isinstance(action, Shutdown):
                assert self.shutdown is None, "shutdown twice"
                self.shutdown = action
            elif isinstance(action, CreateTrial):
                self.created.append(action)
                self.running.append(action.request_id)
                self.max_running_seen = max(self.max_running_seen, len(self.running))
                self.take(self.searcher.apply(TrialCreated(action.request_id)))
        return actions

    def send(self, event: Event) -> list[Action]:
        return self.take(self.searcher.apply(event))

    def finish(self, request_id: str, early: ExitReason | None = None) -> None:
        self.running.remove(request_id)
        if early is not None:
            self.send(TrialExitedEarly(request_id, early))
        self.send(TrialExited(request_id))

    def progress(self, request_id: str, fraction: float) -> None:
        self.send(TrialProgress(request_id, fraction))

    def run_to_end(self, early: ExitReason | None = None, limit: int = 10_000) -> None:
        """Finish running trials oldest first until the search shuts down."""
        for _ in range(limit):
            if not self.running:
                return
            self.finish(self.running[0], early)
        raise AssertionError("the search did not end")
