"""Whole halving searches, both modes, played to the end against the session table: a snapshot taken
at any point, restored into a fresh table and fed the later events, answers exactly as the original."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from cairn.searcher_plugin.actions import CreateTrial, SetTrialTarget, Shutdown, StopTrial
from cairn.searcher_plugin.errors import InvalidSnapshot
from cairn.searcher_plugin.events import (
    Event,
    ExitReason,
    TrialCreated,
    TrialExited,
    TrialExitedEarly,
    ValidationCompleted,
)
from cairn.searcher_plugin.sessions import Answer
from cairn.searcher_plugin.spec import SearchSpec
from services.searcher.domain.sessions import SessionManager
from tests.unit.searcher.searcher_asha_builders import halving_spec
from tests.unit.searcher.searcher_builders import REGISTRY

MAX_EVENTS = 400
RUNGS = (100, 300, 900)


def play(spec: SearchSpec, seed: int) -> tuple[list[Event], list[Answer]]:
    """A master whose trials, picked at random, report at their next length (their target in promotion
    mode, the next rung otherwise) with a random loss, sometimes exit early, and exit once stopped."""
    rng = random.Random(seed)
    promotion = spec.searcher.get("stop_once") is False
    manager = SessionManager(REGISTRY)
    answers = [manager.start("s", spec)]
    events: list[Event] = []
    pending: list[Event] = []
    live: set[str] = set()
    # Live trials that are training, and the length they report at next.
    next_length: dict[str, int] = {}
    done = False

    def take(answer: Answer) -> None:
        nonlocal done
        for action in answer.actions:
            if isinstance(action, CreateTrial):
                pending.append(TrialCreated(action.request_id))
                live.add(action.request_id)
                next_length[action.request_id] = action.target_length or RUNGS[0]
            elif isinstance(action, SetTrialTarget):
                next_length[action.request_id] = action.target_length
            elif isinstance(action, StopTrial) and action.request_id in live:
                live.discard(action.request_id)
                next_length.pop(action.request_id, None)
                pending.append(TrialExited(action.request_id))
            elif isinstance(action, Shutdown):
                done = True

    take(answers[0])
    for _ in range(MAX_EVENTS):
        if pending:
            event = pending.pop(0)
        elif next_length and not done:
            rid = rng.choice(sorted(next_length))
            if rng.random() < 0.05:
                live.discard(rid)
                del next_length[rid]
                event = TrialExitedEarly(rid, rng.choice(list(ExitReason)))
                pending.append(TrialExited(rid))
            else:
                length = next_length.pop(rid)
                event = ValidationCompleted(rid, {"loss": rng.random(), "batches": length}, length)
                if not promotion:
                    # Stopping mode: the trial trains on to the next rung unless stopped.
                    next_length[rid] = next((r for r in RUNGS if r > length), length)
        else:
            break
        answer = manager.handle("s", len(events), event)
        events.append(event)
        answers.append(answer)
        take(answer)
    return events, answers


SPECS = {
    "async-stopping": lambda seed: halving_spec(max_trials=9, max_concurrent_trials=3, seed=seed),
    "async-promotion": lambda seed: halving_spec(
        stop_once=False, max_trials=9, max_concurrent_trials=3, seed=seed
    ),
    "adaptive-stopping": lambda seed: halving_spec(
        "adaptive_asha", max_trials=12, max_concurrent_trials=4, max_rungs=3, seed=seed
    ),
    "adaptive-promotion": lambda seed: halving_spec(
        "adaptive_asha", stop_once=False, max_trials=12, max_concurrent_trials=4, max_rungs=3, seed=seed
    ),
}


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("seed", [1, 2])
def test_restore_anywhere_in_a_whole_search_replays_identically(name: str, seed: int) -> None:
    spec = SPECS[name](seed)
    events, answers = play(spec, seed)
    assert any(isinstance(a, Shutdown) for a in answers[-1].actions), "the search ran to its end"
    assert answers[-1].progress == 1.0
    if "promotion" in name:
        assert any(isinstance(a, SetTrialTarget) for answer in answers for a in answer.actions)
    assert any(isinstance(a, StopTrial) for answer in answers for a in answer.actions)
    # Every fifth point keeps the quadratic replay fast; the seeded snapshot test covers every point.
    for k in range(0, len(answers), 5):
        fresh = SessionManager(REGISTRY)
        assert fresh.restore("s", spec, answers[k].snapshot) == answers[k].progress
        for i in range(k, len(events)):
            assert fresh.handle("s", i, events[i]) == answers[i + 1], f"restored at {k}, diverged at {i}"


def test_snapshot_holds_the_tournament_and_its_brackets() -> None:
    spec = SPECS["adaptive-promotion"](3)
    _, answers = play(spec, 3)
    state = json.loads(answers[10].snapshot.state)["method_state"]
    assert set(state) == {"trial_table", "subsearches"}
    assert len(state["subsearches"]) == 2
    assert set(state["subsearches"][0]) >= {"rungs", "trials", "active", "idle", "trial_rungs"}
    assert set(state["trial_table"].values()) == {0, 1}


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["rungs"], [], "method_state.rungs: must be a list of 3 rungs"),
        (["rungs", 0, "units_needed"], 7, r"method_state.rungs\[0\].units_needed: the spec's rung needs 100"),
        (["rungs", 0, "metrics"], [["nobody", 0.5, False]], "names a trial this search did not create"),
        (["trial_rungs"], {"x": 1}, "method_state.stopped: names a trial|method_state.rungs"),
        (["invalid_trials"], -1, "method_state.invalid_trials: must be an integer >= 0"),
    ],
)
def test_bad_halving_snapshots_are_refused(path: list[object], value: object, message: str) -> None:
    spec = SPECS["async-stopping"](4)
    _, answers = play(spec, 4)
    good = answers[8].snapshot
    state = json.loads(good.state)
    target = state["method_state"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InvalidSnapshot, match=message):
        SessionManager(REGISTRY).restore("s", spec, replace(good, state=json.dumps(state).encode()))
