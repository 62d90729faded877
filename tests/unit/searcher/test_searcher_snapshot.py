"""A snapshot restored and fed the later events answers exactly as the original session did."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from typing import Protocol

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cairn.searcher_plugin.actions import Action, CreateTrial
from cairn.searcher_plugin.errors import InvalidSnapshot, InvalidSpec
from cairn.searcher_plugin.events import (
    Event,
    ExitReason,
    TrialCreated,
    TrialExited,
    TrialExitedEarly,
    TrialProgress,
    ValidationCompleted,
)
from cairn.searcher_plugin.sessions import Answer
from cairn.searcher_plugin.spec import SearchSpec
from services.searcher.domain.sessions import SessionManager
from services.searcher.domain.snapshot import SNAPSHOT_VERSION
from tests.unit.searcher.searcher_asha_builders import halving_spec
from tests.unit.searcher.searcher_builders import REGISTRY, creates, grid_spec, random_spec, single_spec

GRID = {
    "a": {"type": "int", "minval": 1, "maxval": 5, "count": 3},
    "opt": {"lr": {"type": "log", "minval": -3, "maxval": -1, "base": 10, "count": 2}, "m": 0.9},
}
MAX_EVENTS = 40
# Validations report one of these lengths: below, at and between the halving specs' rungs (100, 300, 900).
LENGTHS = (0, 50, 100, 300, 500, 900, 1000)


@dataclass
class Trials:
    """The master's view of the search: which trials wait to be created, run, or exited early."""

    pending: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    exited_early: set[str] = field(default_factory=set)

    def take(self, actions: list[Action]) -> None:
        self.pending += [a.request_id for a in actions if isinstance(a, CreateTrial)]

    def options(self) -> list[tuple[str, str]]:
        found = [("created", rid) for rid in self.pending]
        for rid in self.running:
            found += [("progress", rid), ("validation", rid), ("exited", rid)]
            if rid not in self.exited_early:
                found.append(("early", rid))
        return found

    def note(self, event: Event) -> None:
        if isinstance(event, TrialCreated):
            self.pending.remove(event.request_id)
            self.running.append(event.request_id)
        elif isinstance(event, TrialExitedEarly):
            self.exited_early.add(event.request_id)
        elif isinstance(event, TrialExited):
            self.running.remove(event.request_id)


def make_event(kind: str, rid: str, fraction: float, reason: ExitReason, length: int) -> Event:
    if kind == "created":
        return TrialCreated(rid)
    if kind == "progress":
        return TrialProgress(rid, fraction)
    if kind == "validation":
        return ValidationCompleted(rid, {"loss": fraction, "batches": length}, length)
    if kind == "early":
        return TrialExitedEarly(rid, reason)
    return TrialExited(rid)


class Choose(Protocol):
    """Where the next event comes from: a seeded generator, or hypothesis."""

    def count(self) -> int: ...
    def option(self, options: list[tuple[str, str]]) -> tuple[str, str]: ...
    def fraction(self) -> float: ...
    def reason(self) -> ExitReason: ...
    def length(self) -> int: ...


class SeededChoose(Choose):
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def count(self) -> int:
        return MAX_EVENTS

    def option(self, options: list[tuple[str, str]]) -> tuple[str, str]:
        return self.rng.choice(options)

    def fraction(self) -> float:
        return self.rng.random()

    def reason(self) -> ExitReason:
        return self.rng.choice(list(ExitReason))

    def length(self) -> int:
        return self.rng.choice(LENGTHS)


class DrawnChoose(Choose):
    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def count(self) -> int:
        return self.data.draw(st.integers(0, MAX_EVENTS))

    def option(self, options: list[tuple[str, str]]) -> tuple[str, str]:
        return self.data.draw(st.sampled_from(options))

    def fraction(self) -> float:
        return self.data.draw(st.floats(0.0, 1.0))

    def reason(self) -> ExitReason:
        return self.data.draw(st.sampled_from(list(ExitReason)))

    def length(self) -> int:
        return self.data.draw(st.sampled_from(LENGTHS))


def record(spec: SearchSpec, choose: Choose) -> tuple[list[Event], list[Answer]]:
    """Run a session on events chosen by `choose`; answers[i] is the answer at seq i."""
    manager = SessionManager(REGISTRY)
    answers = [manager.start("s", spec)]
    trials = Trials()
    trials.take(answers[0].actions)
    events: list[Event] = []
    for _ in range(choose.count()):
        options = trials.options()
        if not options:
            break
        kind, rid = choose.option(options)
        event = make_event(kind, rid, choose.fraction(), choose.reason(), choose.length())
        answer = manager.handle("s", len(events), event)
        assert answer.snapshot.seq == len(events) + 1
        events.append(event)
        answers.append(answer)
        trials.note(event)
        trials.take(answer.actions)
    return events, answers


def replay_from(spec: SearchSpec, events: list[Event], answers: list[Answer], k: int) -> None:
    fresh = SessionManager(REGISTRY)
    assert fresh.restore("s", spec, answers[k].snapshot) == answers[k].progress
    for i in range(k, len(events)):
        assert fresh.handle("s", i, events[i]) == answers[i + 1], f"restored at {k}, diverged at event {i}"


SPECS = {
    "random": lambda seed: random_spec(5, 2, seed=seed),
    "random-unlimited": lambda seed: random_spec(3, 0, seed=seed),
    "grid": lambda seed: grid_spec(GRID, concurrency=2, seed=seed),
    "single": lambda seed: single_spec(seed=seed),
    "async-halving": lambda seed: halving_spec(max_trials=5, max_concurrent_trials=2, seed=seed),
    "async-halving-promotion": lambda seed: halving_spec(
        stop_once=False, max_trials=5, max_concurrent_trials=2, seed=seed
    ),
    "async-halving-promotion-unlimited": lambda seed: halving_spec(
        stop_once=False, max_trials=4, max_concurrent_trials=0, seed=seed
    ),
    "adaptive-asha": lambda seed: halving_spec(
        "adaptive_asha", max_trials=6, max_concurrent_trials=3, max_rungs=3, seed=seed
    ),
    "adaptive-asha-promotion": lambda seed: halving_spec(
        "adaptive_asha", stop_once=False, max_trials=6, max_concurrent_trials=3, max_rungs=3, seed=seed
    ),
}


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("seed", [0, 7, 2**32 - 1])
def test_restore_at_every_point_replays_identically(name: str, seed: int) -> None:
    spec = SPECS[name](seed)
    events, answers = record(spec, SeededChoose(seed))
    assert events, "the sequence exercises something"
    for k in range(len(answers)):
        replay_from(spec, events, answers, k)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(SPECS)), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_restore_replays_identically_for_any_event_sequence(
    name: str, seed: int, data: st.DataObject
) -> None:
    spec = SPECS[name](seed)
    events, answers = record(spec, DrawnChoose(data))
    k = data.draw(st.integers(0, len(events)))
    replay_from(spec, events, answers, k)


def test_snapshot_is_canonical_json_naming_method_and_version() -> None:
    answer = SessionManager(REGISTRY).start("s", random_spec(3, 1, seed=5))
    state = json.loads(answer.snapshot.state)
    assert state["method"] == answer.snapshot.method == "random"
    assert state["version"] == answer.snapshot.version == SNAPSHOT_VERSION
    assert answer.snapshot.seq == 0
    assert set(state) >= {"spec", "rng", "trials_requested", "trial_progress", "method_state", "shutdown"}
    assert answer.snapshot.state == json.dumps(state, sort_keys=True, separators=(",", ":")).encode()


def test_restore_uses_the_spec_the_snapshot_was_taken_under() -> None:
    spec = random_spec(4, 1, seed=3)
    manager = SessionManager(REGISTRY)
    rid = creates(manager.start("s", spec).actions)[0].request_id
    after_created = manager.handle("s", 0, TrialCreated(rid))
    expected = manager.handle("s", 1, TrialExited(rid))

    other = SessionManager(REGISTRY)
    other.restore("s", random_spec(99, 7, seed=4), after_created.snapshot)
    assert other.handle("s", 1, TrialExited(rid)) == expected


def test_bad_snapshots_are_refused() -> None:
    spec = single_spec()
    good = SessionManager(REGISTRY).start("s", spec).snapshot
    manager = SessionManager(REGISTRY)
    cases = [
        (replace(good, version=99), "snapshot.version: unsupported snapshot format 99"),
        (replace(good, method="grid"), "snapshot.method: 'grid', but the state is of 'single'"),
        (replace(good, state=b"not json"), "snapshot.state: not a searcher snapshot"),
        (replace(good, state=b"[]"), "snapshot.state: not a searcher snapshot"),
        (replace(good, seq=-1), "snapshot.seq: must be >= 0"),
    ]
    for snapshot, message in cases:
        with pytest.raises(InvalidSnapshot) as caught:
            manager.restore("s", spec, snapshot)
        assert str(caught.value).startswith(message)
    state = json.loads(good.state)
    state["trials_closed"] = ["never-requested"]
    with pytest.raises(InvalidSnapshot, match=r"state\.trials_closed"):
        manager.restore("s", spec, replace(good, state=json.dumps(state).encode()))
    state = json.loads(good.state)
    state["spec"]["searcher"]["name"] = "asha"
    state["method"] = "asha"
    with pytest.raises(InvalidSpec, match="unknown searcher 'asha'"):
        manager.restore("s", spec, replace(good, method="asha", state=json.dumps(state).encode()))
    assert "s" not in manager
