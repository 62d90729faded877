"""The kit's session table over a plug-in method: sequence numbers, missing sessions, retried starts,
the snapshot frame and its checks, restores, falling back after a failing search, closing, and the
default preview."""

from __future__ import annotations

import dataclasses

import pytest

from cairn.searcher_plugin import (
    Action,
    Event,
    InvalidRequest,
    InvalidSnapshot,
    InvalidSpec,
    PreviewedTrial,
    SearchSpec,
    SeqMismatch,
    SessionExists,
    SessionNotFound,
    SessionTable,
    TrialCreated,
    TrialExited,
    ValidationCompleted,
)
from tests.unit.searcher_plugin.plugin_builders import ListSearch, ListSearches, creates, list_spec


def started(spec: SearchSpec | None = None) -> tuple[SessionTable, list[str]]:
    table = SessionTable(ListSearches())
    answer = table.start("exp-1", spec or list_spec())
    return table, creates(answer.actions)


def test_the_first_answer_is_framed_at_seq_0_with_the_method_and_its_format() -> None:
    answer = SessionTable(ListSearches()).start("exp-1", list_spec(2))
    assert creates(answer.actions) == ["trial-0", "trial-1"]
    assert (answer.snapshot.seq, answer.snapshot.method, answer.snapshot.version) == (0, "list", 3)
    assert answer.progress == 0.0


def test_seq_counts_applied_events_and_a_stale_event_names_both_numbers() -> None:
    table, (a, b, _) = started()
    assert table.handle("exp-1", 0, TrialCreated(a)).snapshot.seq == 1
    assert table.handle("exp-1", 1, TrialCreated(b)).snapshot.seq == 2
    with pytest.raises(SeqMismatch) as caught:
        table.handle("exp-1", 1, TrialExited(a))
    assert "is at seq 2, but the event follows seq 1" in str(caught.value)
    answer = table.handle("exp-1", 2, TrialExited(a))
    assert answer.snapshot.seq == 3 and answer.progress == pytest.approx(1 / 3)


def test_unknown_sessions_and_missing_ids() -> None:
    table = SessionTable(ListSearches())
    with pytest.raises(SessionNotFound, match="search session 'nope' not found"):
        table.handle("nope", 0, TrialExited("trial-0"))
    with pytest.raises(InvalidRequest, match="session_id: required"):
        table.start("", list_spec())


def test_a_retried_start_answers_the_same_until_an_event_applies() -> None:
    table = SessionTable(ListSearches())
    first = table.start("exp-1", list_spec(seed=4))
    assert table.start("exp-1", list_spec(seed=4)) == first
    with pytest.raises(SessionExists, match="already exists"):
        table.start("exp-1", list_spec(seed=5))
    table.handle("exp-1", 0, TrialCreated("trial-0"))
    with pytest.raises(SessionExists, match="at seq 1"):
        table.start("exp-1", list_spec(seed=4))


def test_a_bad_spec_opens_no_session() -> None:
    table = SessionTable(ListSearches())
    with pytest.raises(InvalidSpec, match=r"searcher\.trials: must be >= 1"):
        table.start("exp-1", list_spec(0))
    assert "exp-1" not in table and len(table) == 0


def test_a_restored_session_answers_as_the_original_did() -> None:
    table, (a, b, c) = started()
    table.handle("exp-1", 0, TrialExited(a))
    at_two = table.handle("exp-1", 1, TrialExited(b))
    expected = table.handle("exp-1", 2, TrialExited(c))

    other = SessionTable(ListSearches())
    # The spec sent is not the one the state was taken under: the state's own spec wins.
    assert other.restore("exp-1", list_spec(7), at_two.snapshot) == at_two.progress
    assert other.handle("exp-1", 2, TrialExited(c)) == expected


def test_restore_replaces_a_live_session() -> None:
    table, (a, _, _) = started()
    at_zero = table.start("exp-1", list_spec())  # the retried start: the snapshot at seq 0
    table.handle("exp-1", 0, TrialExited(a))
    table.restore("exp-1", list_spec(), at_zero.snapshot)
    with pytest.raises(SeqMismatch, match="is at seq 0"):
        table.handle("exp-1", 1, TrialExited(a))


def test_the_frame_is_checked_before_the_method_reads_the_state() -> None:
    table, _ = started()
    good = table.start("exp-1", list_spec()).snapshot
    cases = [
        (
            dataclasses.replace(good, version=2),
            "snapshot.version: unsupported snapshot format 2 (this searcher reads 3)",
        ),
        (dataclasses.replace(good, seq=-1), "snapshot.seq: must be >= 0, got -1"),
        (dataclasses.replace(good, state=b"{not json"), "snapshot.state: not JSON"),
    ]
    for snapshot, message in cases:
        with pytest.raises(InvalidSnapshot) as caught:
            table.restore("exp-1", list_spec(), snapshot)
        assert str(caught.value) == message
    # The live session was not replaced.
    assert table.handle("exp-1", 0, TrialCreated("trial-0")).snapshot.seq == 1


class FailsOnValidation(ListSearch):
    """A method that changes its state and then fails: the session must not keep the half-change."""

    def apply(self, event: Event) -> list[Action]:
        if isinstance(event, ValidationCompleted):
            self.exited.append("trial-2")
            raise RuntimeError("method failed")
        return super().apply(event)


class FailingSearches(ListSearches):
    def create(self, spec: SearchSpec) -> ListSearch:
        return FailsOnValidation(spec)


def test_a_search_failing_midway_falls_back_to_its_last_snapshot() -> None:
    table = SessionTable(FailingSearches())
    table.start("exp-1", list_spec())
    before = table.handle("exp-1", 0, TrialExited("trial-0"))
    with pytest.raises(RuntimeError):
        table.handle("exp-1", 1, ValidationCompleted("trial-1", {"loss": 1.0}))
    after = table.handle("exp-1", 1, TrialExited("trial-1"))
    assert after.progress == pytest.approx(2 / 3)

    reference = SessionTable(FailingSearches())
    reference.restore("exp-1", list_spec(), before.snapshot)
    assert reference.handle("exp-1", 1, TrialExited("trial-1")) == after


def test_answers_without_their_state_fall_back_to_the_last_state_and_the_events_since() -> None:
    table = SessionTable(FailingSearches())
    table.start("exp-1", list_spec())
    unsaved = table.handle("exp-1", 0, TrialExited("trial-0"), state_needed=False)
    # The frame without the state: nothing was serialized for it.
    assert (unsaved.snapshot.seq, unsaved.snapshot.state, unsaved.snapshot.method) == (1, b"", "list")
    with pytest.raises(RuntimeError):
        table.handle("exp-1", 1, ValidationCompleted("trial-1", {"loss": 1.0}), state_needed=False)
    # Back to the state after trial-0's exit (the start's state and that event again), not before it.
    after = table.handle("exp-1", 1, TrialExited("trial-1"))
    assert after.progress == pytest.approx(2 / 3) and after.snapshot.state

    reference = SessionTable(FailingSearches())
    reference.start("exp-1", list_spec())
    reference.handle("exp-1", 0, TrialExited("trial-0"))
    assert reference.handle("exp-1", 1, TrialExited("trial-1")) == after


def test_a_session_answering_without_state_serializes_once_past_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cairn.searcher_plugin import sessions

    monkeypatch.setattr(sessions, "MAX_UNSERIALIZED", 1)
    table, (a, b, _) = started()
    assert not table.handle("exp-1", 0, TrialCreated(a), state_needed=False).snapshot.state
    # A second unsaved event would leave two to apply again after a failure: the state comes along.
    assert table.handle("exp-1", 1, TrialCreated(b), state_needed=False).snapshot.state


def test_close_is_idempotent() -> None:
    table, (a, _, _) = started()
    table.close("exp-1")
    table.close("exp-1")
    table.close("never-opened")
    with pytest.raises(SessionNotFound):
        table.handle("exp-1", 0, TrialCreated(a))


def test_the_default_preview_is_the_first_trials_of_a_new_search() -> None:
    preview = ListSearches().preview(list_spec(2, seed=9))
    assert preview.unit == ""
    assert preview.trials == [
        PreviewedTrial("trial-0", {"index": 0, "seed": 9}),
        PreviewedTrial("trial-1", {"index": 1, "seed": 9}),
    ]
