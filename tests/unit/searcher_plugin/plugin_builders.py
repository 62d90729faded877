"""A small method written against the plug-in kit, as a plug-in author would: `ListSearch` asks for
a fixed list of trials (all at once: the kind of method LimitConcurrency is for), remembers the best
validation result, and shuts down when every trial has exited."""

from __future__ import annotations

import json
from typing import Any

from cairn.searcher_plugin import (
    Action,
    CreateTrial,
    Event,
    InvalidEvent,
    InvalidSnapshot,
    Search,
    SearchFactory,
    SearchSpec,
    Shutdown,
    Snapshot,
    StopTrial,
    TrialExited,
    ValidationCompleted,
    canonical_json,
)
from cairn.searcher_plugin.fields import int_field


class ListSearch(Search):
    method_name = "list"

    def __init__(self, spec: SearchSpec) -> None:
        self.spec = spec
        self.trials = int_field(spec.searcher, "trials", "searcher", minimum=1)
        # Stop every trial whose loss is above this (none when absent).
        self.stop_above = spec.searcher.get("stop_above")
        self.exited: list[str] = []
        self.best: float | None = None
        self.shutdown = False

    def request_ids(self) -> list[str]:
        return [f"trial-{index}" for index in range(self.trials)]

    def initial_actions(self) -> list[Action]:
        return [
            CreateTrial(rid, {"index": index, "seed": self.spec.seed}, trial_seed=index)
            for index, rid in enumerate(self.request_ids())
        ]

    def apply(self, event: Event) -> list[Action]:
        if event.request_id not in self.request_ids():
            raise InvalidEvent(f"event.request_id: no trial '{event.request_id}'")
        if isinstance(event, ValidationCompleted):
            loss = float(event.metrics["loss"])
            self.best = loss if self.best is None else min(self.best, loss)
            if self.stop_above is not None and loss > self.stop_above:
                return [StopTrial(event.request_id)]
        if isinstance(event, TrialExited) and event.request_id not in self.exited:
            self.exited.append(event.request_id)
            if len(self.exited) == self.trials and not self.shutdown:
                self.shutdown = True
                return [Shutdown()]
        return []

    def progress(self) -> float:
        return len(self.exited) / self.trials

    def to_bytes(self) -> bytes:
        state = {
            "spec": self.spec.to_json(),
            "exited": self.exited,
            "best": self.best,
            "shutdown": self.shutdown,
        }
        return canonical_json(state)


class ListSearches(SearchFactory):
    snapshot_version = 3

    def create(self, spec: SearchSpec) -> ListSearch:
        return ListSearch(spec)

    def restore(self, snapshot: Snapshot) -> ListSearch:
        try:
            state: dict[str, Any] = json.loads(snapshot.state)
        except ValueError:
            raise InvalidSnapshot("snapshot.state: not JSON") from None
        search = ListSearch(SearchSpec.from_json(state["spec"]))
        search.exited = list(state["exited"])
        search.best = state["best"]
        search.shutdown = state["shutdown"]
        return search


def list_spec(trials: int = 3, seed: int = 0, **searcher: Any) -> SearchSpec:
    return SearchSpec({"name": "custom", "trials": trials, **searcher}, {}, seed)


def creates(actions: list[Action]) -> list[str]:
    return [a.request_id for a in actions if isinstance(a, CreateTrial)]
