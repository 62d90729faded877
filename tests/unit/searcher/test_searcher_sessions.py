"""The session table: sequence numbers, missing sessions, retried starts, restores, closing, and
concurrent callers."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from cairn.searcher_plugin.actions import Action
from cairn.searcher_plugin.errors import (
    InvalidEvent,
    InvalidRequest,
    InvalidSpec,
    SeqMismatch,
    SessionExists,
    SessionNotFound,
)
from cairn.searcher_plugin.events import TrialCreated, TrialExited, ValidationCompleted
from services.searcher.domain.hyperparameters import HyperparameterSpace
from services.searcher.domain.method import SearchContext, SearchMethod
from services.searcher.domain.methods.random_search import RandomSearch, random_config
from services.searcher.domain.registry import builtin_registry
from services.searcher.domain.sessions import SessionManager
from tests.unit.searcher.searcher_builders import REGISTRY, creates, make_spec, random_spec, single_spec

THREADS = 8


def started(spec: Any = None) -> tuple[SessionManager, list[str]]:
    manager = SessionManager(REGISTRY)
    answer = manager.start("exp-1", spec or random_spec(4, 2))
    return manager, [c.request_id for c in creates(answer.actions)]


def test_seq_counts_applied_events() -> None:
    manager, (a, b) = started()
    assert manager.handle("exp-1", 0, TrialCreated(a)).snapshot.seq == 1
    assert manager.handle("exp-1", 1, TrialCreated(b)).snapshot.seq == 2
    assert manager.handle("exp-1", 2, TrialExited(a)).snapshot.seq == 3


def test_an_event_after_another_seq_names_both_numbers_and_changes_nothing() -> None:
    manager, (a, _) = started()
    manager.handle("exp-1", 0, TrialCreated(a))
    with pytest.raises(SeqMismatch) as caught:
        manager.handle("exp-1", 0, TrialExited(a))
    assert "is at seq 1" in str(caught.value) and "follows seq 0" in str(caught.value)
    assert manager.handle("exp-1", 1, TrialExited(a)).snapshot.seq == 2


def test_a_refused_event_does_not_count() -> None:
    manager, _ = started()
    with pytest.raises(InvalidEvent):
        manager.handle("exp-1", 0, TrialExited("unknown"))
    with pytest.raises(SeqMismatch):
        manager.handle("exp-1", 1, TrialExited("unknown"))


def test_unknown_session_is_not_found() -> None:
    manager = SessionManager(REGISTRY)
    with pytest.raises(SessionNotFound, match="search session 'nope' not found"):
        manager.handle("nope", 0, TrialExited("x"))


def test_session_id_is_required() -> None:
    manager = SessionManager(REGISTRY)
    with pytest.raises(InvalidRequest, match="session_id: required"):
        manager.start("", single_spec())
    with pytest.raises(InvalidRequest, match="session_id: required"):
        manager.handle("", 0, TrialExited("x"))


def test_a_retried_start_answers_the_same_until_an_event_applies() -> None:
    spec = random_spec(4, 2, seed=11)
    manager = SessionManager(REGISTRY)
    first = manager.start("exp-1", spec)
    assert manager.start("exp-1", random_spec(4, 2, seed=11)) == first
    with pytest.raises(SessionExists, match="already exists"):
        manager.start("exp-1", random_spec(4, 2, seed=12))
    manager.handle("exp-1", 0, TrialCreated(creates(first.actions)[0].request_id))
    with pytest.raises(SessionExists, match=r"at seq 1"):
        manager.start("exp-1", spec)


def test_a_bad_spec_opens_no_session() -> None:
    manager = SessionManager(REGISTRY)
    with pytest.raises(InvalidSpec, match=r"searcher\.max_trials: required"):
        manager.start("exp-1", make_spec({"name": "random"}, {}))
    assert "exp-1" not in manager


def test_restore_replaces_the_session() -> None:
    manager, (a, _) = started()
    at_zero = manager.start("exp-1", random_spec(4, 2))  # the retried start: the snapshot at seq 0
    manager.handle("exp-1", 0, TrialCreated(a))
    manager.handle("exp-1", 1, TrialExited(a))
    manager.restore("exp-1", random_spec(4, 2), at_zero.snapshot)
    with pytest.raises(SeqMismatch, match="is at seq 0"):
        manager.handle("exp-1", 2, TrialCreated(a))
    assert manager.handle("exp-1", 0, TrialCreated(a)).snapshot.seq == 1


def test_close_is_idempotent() -> None:
    manager, (a, _) = started()
    manager.close("exp-1")
    manager.close("exp-1")
    manager.close("never-opened")
    with pytest.raises(SessionNotFound):
        manager.handle("exp-1", 0, TrialCreated(a))
    assert len(manager) == 0


def test_racing_callers_at_one_seq_apply_the_event_once() -> None:
    manager, ids = started(random_spec(THREADS, THREADS))
    barrier = threading.Barrier(THREADS, timeout=10)

    def send(rid: str) -> str:
        barrier.wait()
        try:
            manager.handle("exp-1", 0, TrialCreated(rid))
            return "applied"
        except SeqMismatch:
            return "refused"

    with ThreadPoolExecutor(THREADS) as pool:
        outcomes = list(pool.map(send, ids, timeout=20))
    assert sorted(outcomes) == ["applied"] + ["refused"] * (THREADS - 1)


def test_sessions_run_independently_in_parallel() -> None:
    manager = SessionManager(REGISTRY)

    def run(index: int) -> int:
        session = f"exp-{index}"
        answer = manager.start(session, random_spec(5, 1, seed=index))
        seq = 0
        for _ in range(20):
            pending = creates(answer.actions)
            if not pending:
                break
            rid = pending[0].request_id
            manager.handle(session, seq, TrialCreated(rid))
            answer = manager.handle(session, seq + 1, TrialExited(rid))
            seq += 2
        return seq

    with ThreadPoolExecutor(THREADS) as pool:
        assert list(pool.map(run, range(THREADS), timeout=30)) == [10] * THREADS
    assert len(manager) == THREADS


class BrokenOnValidation(RandomSearch):
    """A plug-in that changes its state and then fails: the session must not keep the half-change."""

    def validation_completed(
        self, ctx: SearchContext, request_id: str, metrics: Mapping[str, Any], steps_completed: int
    ) -> list[Action]:
        self.created_trials += 100
        ctx.rng.bits32()
        raise RuntimeError("plug-in failed")


def build_broken(searcher: Mapping[str, Any], space: HyperparameterSpace) -> SearchMethod:
    return BrokenOnValidation(random_config(searcher))


def test_a_method_failing_midway_leaves_the_session_as_it_was() -> None:
    registry = builtin_registry()
    registry.register("broken", build_broken)
    manager = SessionManager(registry)
    spec = make_spec({"name": "broken", "max_trials": 2, "max_concurrent_trials": 1}, {})
    rid = creates(manager.start("exp-1", spec).actions)[0].request_id
    before = manager.handle("exp-1", 0, TrialCreated(rid))
    with pytest.raises(RuntimeError):
        manager.handle("exp-1", 1, ValidationCompleted(rid, {"loss": 1.0}, 10))
    after = manager.handle("exp-1", 1, TrialExited(rid))

    reference = SessionManager(registry)
    reference.restore("exp-1", spec, before.snapshot)
    assert reference.handle("exp-1", 1, TrialExited(rid)) == after


def test_registering_a_name_twice_is_refused() -> None:
    registry = builtin_registry()
    with pytest.raises(ValueError, match="already registered"):
        registry.register("random", build_broken)


def test_a_batch_of_events_is_one_answer_counting_one_per_event() -> None:
    """HandleEvents: the same actions, state and seq as the events one by one, in one answer."""
    one_by_one, (a, b) = started()
    singly = [
        one_by_one.handle("exp-1", 0, TrialCreated(a)),
        one_by_one.handle("exp-1", 1, TrialCreated(b)),
        one_by_one.handle("exp-1", 2, TrialExited(a)),
    ]
    batched_manager, _ = started()
    batched = batched_manager.handle_many("exp-1", 0, [TrialCreated(a), TrialCreated(b), TrialExited(a)])
    assert batched.snapshot.seq == 3
    assert batched.actions == [action for answer in singly for action in answer.actions]
    assert batched.snapshot.state == singly[-1].snapshot.state
    assert batched.progress == singly[-1].progress


def test_a_refused_event_refuses_its_whole_batch_naming_its_index() -> None:
    manager, (a, b) = started()
    with pytest.raises(InvalidEvent) as caught:
        manager.handle_many("exp-1", 0, [TrialCreated(a), TrialExited("unknown"), TrialCreated(b)])
    assert str(caught.value).startswith("events[1]: ")
    # Nothing of it was kept: the first event applies again at seq 0.
    assert manager.handle_many("exp-1", 0, [TrialCreated(a), TrialCreated(b)]).snapshot.seq == 2
    with pytest.raises(InvalidEvent):
        manager.handle_many("exp-1", 2, [])
