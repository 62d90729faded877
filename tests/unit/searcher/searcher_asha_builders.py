"""Builders for the halving searches' tests: specs with Determined's defaults, and a master stand-in
that names trials by creation order and keeps every answer for the test to read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cairn.searcher_plugin.actions import Action, CreateTrial, SetTrialTarget, Shutdown, StopTrial
from cairn.searcher_plugin.events import (
    Event,
    ExitReason,
    TrialCreated,
    TrialExited,
    TrialExitedEarly,
    ValidationCompleted,
)
from cairn.searcher_plugin.spec import SearchSpec
from services.searcher.domain.methods.halving_promotion import PromotionHalving
from services.searcher.domain.methods.halving_stopping import StoppingHalving
from services.searcher.domain.searcher import Searcher
from tests.unit.searcher.searcher_builders import REGISTRY, make_spec

HPARAMS: dict[str, Any] = {"lr": {"type": "double", "minval": 0.0001, "maxval": 0.1}, "global_batch_size": 32}


def halving_spec(
    name: str = "async_halving", *, stop_once: bool = True, seed: int = 0, **fields: Any
) -> SearchSpec:
    """A searcher section as the master sends it; `fields` override the defaults below."""
    section: dict[str, Any] = {
        "name": name,
        "metric": "loss",
        "smaller_is_better": True,
        "max_trials": 8,
        "time_metric": "batches",
        "max_time": 900,
        "divisor": 3,
        "max_concurrent_trials": 16,
        "stop_once": stop_once,
    }
    if name == "async_halving":
        section["num_rungs"] = 3
    else:
        section.update(mode="standard", max_rungs=5, bracket_rungs=[])
    section.update(fields)
    for key in [k for k, v in section.items() if v is None]:
        del section[key]
    return make_spec(section, HPARAMS, seed)


def described(action: Action, names: dict[str, str]) -> tuple[Any, ...]:
    """An action with request ids replaced by the trials' names (T0, T1, ... in creation order)."""
    if isinstance(action, CreateTrial):
        return ("create", names[action.request_id], action.target_length)
    if isinstance(action, StopTrial):
        return ("stop", names[action.request_id])
    if isinstance(action, SetTrialTarget):
        return ("target", names[action.request_id], action.target_length)
    assert isinstance(action, Shutdown)
    return ("shutdown", action.cancel, action.failure)


@dataclass
class HalvingMaster:
    """Applies the searcher's answers as the master would (each create becomes a trial at once) and
    records them, described by trial name."""

    searcher: Searcher
    names: dict[str, str] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    stopped: set[str] = field(default_factory=set)
    exited: set[str] = field(default_factory=set)
    shutdown: Shutdown | None = None
    log: list[tuple[Any, ...]] = field(default_factory=list)
    # The first answer (initial trials).
    answer: list[tuple[Any, ...]] = field(default_factory=list)

    @classmethod
    def start(cls, spec: SearchSpec) -> HalvingMaster:
        master = cls(Searcher.new(spec, REGISTRY))
        master.answer = master._take(master.searcher.initial_actions())
        return master

    def _take(self, actions: list[Action]) -> list[tuple[Any, ...]]:
        described_actions = []
        for action in actions:
            if isinstance(action, CreateTrial):
                name = f"T{len(self.ids)}"
                self.names[action.request_id] = name
                self.ids.append(action.request_id)
            elif isinstance(action, StopTrial):
                self.stopped.add(action.request_id)
            elif isinstance(action, Shutdown):
                assert self.shutdown is None, "shutdown twice"
                self.shutdown = action
            described_actions.append(described(action, self.names))
        self.log += described_actions
        for action in actions:
            if isinstance(action, CreateTrial):
                assert not self.searcher.apply(TrialCreated(action.request_id))
        return described_actions

    def rid(self, name: str) -> str:
        return self.ids[int(name.removeprefix("T"))]

    def send(self, event: Event) -> list[tuple[Any, ...]]:
        return self._take(self.searcher.apply(event))

    def validate(self, name: str, loss: float, time: int, **extra: Any) -> list[tuple[Any, ...]]:
        return self.send(ValidationCompleted(self.rid(name), {"loss": loss, "batches": time, **extra}, time))

    def exit(self, name: str, early: ExitReason | None = None) -> list[tuple[Any, ...]]:
        rid = self.rid(name)
        answer = self.send(TrialExitedEarly(rid, early)) if early is not None else []
        self.exited.add(rid)
        return answer + self.send(TrialExited(rid))

    def exit_stopped(self) -> list[tuple[Any, ...]]:
        """Every stopped trial that has not exited yet exits, in creation order."""
        answer: list[tuple[Any, ...]] = []
        for rid in list(self.ids):
            if rid in self.stopped and rid not in self.exited:
                answer += self.exit(self.names[rid])
        return answer

    @property
    def bracket(self) -> StoppingHalving | PromotionHalving:
        """The search, when it is a single halving bracket (async_halving)."""
        method = self.searcher.method
        assert isinstance(method, (StoppingHalving, PromotionHalving))
        return method

    def rung(self, index: int) -> list[str]:
        """The names in a rung of the single bracket, best first."""
        return [self.names[e.request_id] for e in self.bracket.rungs[index].entries]

    def live(self) -> list[str]:
        return [self.names[rid] for rid in self.ids if rid not in self.stopped and rid not in self.exited]
