"""A search in progress: a search method plus the bookkeeping every method shares (Determined's
searcher.go), driven one event at a time.

The searcher tracks which trials were requested (every Create), created, closed (exited), exited
early, canceled and failed, and each live trial's progress. Once every requested trial has exited
and the method asks for no more, it appends Shutdown — with `cancel` when every trial was canceled
by the user and `failure` when every trial errored — exactly once.

Events are checked before anything changes: one naming a trial this search never requested is
refused and leaves the searcher as it was. Repeats (a second exit, a second creation) are applied
as no-ops, as Determined ignores a repeated early exit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from cairn.searcher_plugin.actions import Action, CreateTrial, Shutdown
from cairn.searcher_plugin.errors import InvalidEvent, InvalidSnapshot
from cairn.searcher_plugin.events import (
    EVENT_FIELDS,
    Event,
    ExitReason,
    TrialCreated,
    TrialExitedEarly,
    TrialProgress,
    ValidationCompleted,
)
from cairn.searcher_plugin.method import Search
from cairn.searcher_plugin.spec import SearchSpec
from services.searcher.domain.hyperparameters import HyperparameterSpace
from services.searcher.domain.method import SearchContext, SearchMethod
from services.searcher.domain.registry import MethodRegistry
from services.searcher.domain.rng import MersenneTwister
from services.searcher.domain.snapshot import state_bytes
from services.searcher.domain.state_fields import read_ids, read_mapping


def build_method(spec: SearchSpec, registry: MethodRegistry) -> tuple[str, SearchMethod, HyperparameterSpace]:
    """Check the spec and build its method; raises InvalidSpec naming the field."""
    factory = registry.factory(spec.searcher.get("name"))
    space = HyperparameterSpace.parse(spec.hyperparameters)
    return str(spec.searcher["name"]), factory(spec.searcher, space), space


class Searcher(Search):
    """The search the plug-in kit serves for every built-in method (see cairn.searcher_plugin.method)."""

    def __init__(
        self, spec: SearchSpec, method_name: str, method: SearchMethod, space: HyperparameterSpace
    ) -> None:
        self.spec = spec
        self.method_name = method_name
        self.method = method
        self.ctx = SearchContext(MersenneTwister(spec.seed), space)
        self.requested: list[str] = []
        self._requested_set: set[str] = set()
        self.created: set[str] = set()
        self.closed: set[str] = set()
        self.exits: set[str] = set()
        self.cancels: set[str] = set()
        self.failures: set[str] = set()
        self.trial_progress: dict[str, float] = {}
        self.shutdown = False

    @classmethod
    def new(cls, spec: SearchSpec, registry: MethodRegistry) -> Searcher:
        name, method, space = build_method(spec, registry)
        return cls(spec, name, method, space)

    # --- driving -------------------------------------------------------------------------------

    def initial_actions(self) -> list[Action]:
        actions = self._record(self.method.initial_trials(self.ctx))
        if not self.requested:
            # A method that asks for nothing would leave the experiment waiting forever.
            actions.append(self._shut_down())
        return actions

    def apply(self, event: Event) -> list[Action]:
        self._check(event)
        rid = event.request_id
        if isinstance(event, TrialCreated):
            if rid in self.created:
                return []
            self.created.add(rid)
            if rid not in self.closed and rid not in self.exits:
                self.trial_progress[rid] = 0.0
            return self._record(self.method.trial_created(self.ctx, rid))
        if isinstance(event, ValidationCompleted):
            actions = self.method.validation_completed(self.ctx, rid, event.metrics, event.steps_completed)
            return self._record(actions)
        if isinstance(event, TrialProgress):
            # Only live trials move: a closed trial counts as done and an invalid one not at all.
            if rid in self.trial_progress and rid not in self.closed:
                self.trial_progress[rid] = min(1.0, max(0.0, event.progress))
            return []
        if isinstance(event, TrialExitedEarly):
            if rid in self.exits:
                return []
            if event.reason.invalid_hp:
                self.trial_progress.pop(rid, None)
            elif event.reason is ExitReason.USER_CANCELED:
                self.cancels.add(rid)
            elif event.reason is ExitReason.ERRORED:
                # Only errors count as failures: they are what fail an experiment.
                self.failures.add(rid)
            self.exits.add(rid)
            return self._finish(self._record(self.method.trial_exited_early(self.ctx, rid, event.reason)))
        if rid in self.closed:
            return []
        self.closed.add(rid)
        return self._finish(self._record(self.method.trial_exited(self.ctx, rid)))

    def _check(self, event: Event) -> None:
        where = f"event.{EVENT_FIELDS[type(event)]}"
        if not event.request_id:
            raise InvalidEvent(f"{where}.request_id: required")
        if event.request_id not in self._requested_set:
            raise InvalidEvent(
                f"{where}.request_id: no trial with request id '{event.request_id}' "
                "was requested in this search"
            )
        if isinstance(event, TrialProgress) and not math.isfinite(event.progress):
            raise InvalidEvent(f"{where}.progress: must be a fraction in [0, 1], got {event.progress}")

    def _record(self, actions: list[Action]) -> list[Action]:
        for action in actions:
            if isinstance(action, CreateTrial):
                if action.request_id in self._requested_set:
                    raise AssertionError(f"search method reused request id {action.request_id}")
                self.requested.append(action.request_id)
                self._requested_set.add(action.request_id)
            elif isinstance(action, Shutdown):
                self.shutdown = True
        return actions

    def _finish(self, actions: list[Action]) -> list[Action]:
        if not self.shutdown and len(self.requested) == len(self.closed):
            actions.append(self._shut_down())
        return actions

    def _shut_down(self) -> Shutdown:
        total = len(self.requested)
        self.shutdown = True
        return Shutdown(
            cancel=total > 0 and len(self.cancels) >= total, failure=total > 0 and len(self.failures) >= total
        )

    def progress(self) -> float:
        # In request-id order, as a restored searcher holds them: float sums depend on the order.
        value = self.method.progress(dict(sorted(self.trial_progress.items())), self.closed)
        if not math.isfinite(value):
            return 0.0
        return min(1.0, max(0.0, value))

    # --- state ---------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        return state_bytes(self.to_state())

    def to_state(self) -> dict[str, Any]:
        return {
            "method": self.method_name,
            "spec": self.spec.to_json(),
            "rng": self.ctx.rng.to_state(),
            "trials_requested": list(self.requested),
            "trials_created": sorted(self.created),
            "trials_closed": sorted(self.closed),
            "exits": sorted(self.exits),
            "cancels": sorted(self.cancels),
            "failures": sorted(self.failures),
            "trial_progress": dict(sorted(self.trial_progress.items())),
            "shutdown": self.shutdown,
            "method_state": self.method.to_state(),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], registry: MethodRegistry) -> Searcher:
        spec = SearchSpec.from_json(read_mapping(state, "spec", "state"))
        searcher = cls.new(spec, registry)
        if searcher.method_name != state.get("method"):
            raise InvalidSnapshot(
                f"state.method: the snapshot is of '{state.get('method')}', "
                f"its spec runs '{searcher.method_name}'"
            )
        searcher.ctx.rng = MersenneTwister.from_state(read_mapping(state, "rng", "state"), "state.rng")
        searcher.requested = read_ids(state, "trials_requested", "state")
        searcher._requested_set = set(searcher.requested)
        if len(searcher._requested_set) != len(searcher.requested):
            raise InvalidSnapshot("state.trials_requested: request ids repeat")
        for key in ("trials_created", "trials_closed", "exits", "cancels", "failures"):
            ids = set(read_ids(state, key, "state"))
            if not ids <= searcher._requested_set:
                raise InvalidSnapshot(f"state.{key}: names trials that were never requested")
            setattr(searcher, _SET_ATTRS[key], ids)
        progress = read_mapping(state, "trial_progress", "state")
        for rid, value in progress.items():
            if (
                rid not in searcher._requested_set
                or not isinstance(value, (int, float))
                or isinstance(value, bool)
            ):
                raise InvalidSnapshot(f"state.trial_progress.{rid}: must be a requested trial's fraction")
        searcher.trial_progress = {rid: float(value) for rid, value in progress.items()}
        shutdown = state.get("shutdown")
        if not isinstance(shutdown, bool):
            raise InvalidSnapshot("state.shutdown: must be true or false")
        searcher.shutdown = shutdown
        searcher.method.load_state(read_mapping(state, "method_state", "state"))
        return searcher


_SET_ATTRS = {
    "trials_created": "created",
    "trials_closed": "closed",
    "exits": "exits",
    "cancels": "cancels",
    "failures": "failures",
}
