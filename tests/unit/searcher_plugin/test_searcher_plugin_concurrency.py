"""LimitConcurrency around a plug-in method: at most `limit` trials handed out, the rest in order as
trials exit; the limit from the spec; Shutdown, StopTrial and SetTrialTarget meeting held-back
trials; events for trials never handed out; and the wrapper's state through the kit's snapshots."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest

from cairn.searcher_plugin import (
    Action,
    Answer,
    ConcurrencyLimited,
    CreateTrial,
    Event,
    InvalidEvent,
    InvalidSnapshot,
    InvalidSpec,
    LimitConcurrency,
    SearchSpec,
    SessionTable,
    SetTrialTarget,
    Shutdown,
    Snapshot,
    StopTrial,
    TrialCreated,
    TrialExited,
    TrialExitedEarly,
    TrialProgress,
    ValidationCompleted,
)
from cairn.searcher_plugin.events import ExitReason
from tests.unit.searcher_plugin.plugin_builders import ListSearch, ListSearches, creates, list_spec


class Steered(ListSearch):
    """ListSearch steered by its validations' metrics: {"stop": rid} stops trial rid, {"retarget":
    rid, "length": n} sets its target. With `searcher.shutdown_upfront` its Shutdown comes with the
    first trials (a method that asks for everything at once)."""

    def initial_actions(self) -> list[Action]:
        actions = super().initial_actions()
        if self.spec.searcher.get("shutdown_upfront"):
            self.shutdown = True
            actions.append(Shutdown())
        return actions

    def apply(self, event: Event) -> list[Action]:
        actions = super().apply(event)
        if isinstance(event, ValidationCompleted):
            if "stop" in event.metrics:
                actions.append(StopTrial(event.metrics["stop"]))
            if "retarget" in event.metrics:
                actions.append(SetTrialTarget(event.metrics["retarget"], event.metrics["length"]))
        return actions


class SteeredSearches(ListSearches):
    def create(self, spec: SearchSpec) -> Steered:
        return Steered(spec)

    def restore(self, snapshot: Snapshot) -> Steered:
        restored = super().restore(snapshot)
        search = Steered(restored.spec)
        search.exited, search.best, search.shutdown = restored.exited, restored.best, restored.shutdown
        return search


def limited(limit: int, trials: int = 3, **searcher: Any) -> tuple[ConcurrencyLimited, list[Action]]:
    search = ConcurrencyLimited(Steered(list_spec(trials, **searcher)), limit)
    return search, search.initial_actions()


def create(index: int, target_length: int = 0) -> CreateTrial:
    """The CreateTrial ListSearch asks for as its trial `index` (under seed 0)."""
    return CreateTrial(f"trial-{index}", {"index": index, "seed": 0}, index, target_length)


def waiting_ids(search: ConcurrencyLimited) -> list[str]:
    return [w.request_id if isinstance(w, CreateTrial) else "shutdown" for w in search.waiting]


def validated(rid: str, **steer: Any) -> ValidationCompleted:
    return ValidationCompleted(rid, {"loss": 1.0, **steer})


# --- holding back and handing out ----------------------------------------------------------------


def test_at_most_limit_creates_go_out_and_the_rest_follow_in_order_as_trials_exit() -> None:
    search, first = limited(2, trials=5)
    assert first == [create(0), create(1)]
    assert sorted(search.running) == ["trial-0", "trial-1"]
    assert waiting_ids(search) == ["trial-2", "trial-3", "trial-4"]
    # Only TrialExited frees a slot: a created, validated, progressing or failing trial still runs.
    for event in (
        TrialCreated("trial-0"),
        validated("trial-0"),
        TrialProgress("trial-0", 0.5),
        TrialExitedEarly("trial-0", ExitReason.ERRORED),
    ):
        assert search.apply(event) == []
    assert search.apply(TrialExited("trial-1")) == [create(2)]
    assert search.apply(TrialExited("trial-0")) == [create(3)]
    assert search.apply(TrialExited("trial-3")) == [create(4)]
    assert search.apply(TrialExited("trial-2")) == []
    assert search.apply(TrialExited("trial-4")) == [Shutdown()]
    assert not search.running and not search.waiting and search.progress() == 1.0


@pytest.mark.parametrize("limit", [0, 5, 9])
def test_limit_0_or_at_least_the_trials_holds_nothing_back(limit: int) -> None:
    search, first = limited(limit, trials=5)
    assert first == [create(index) for index in range(5)]
    assert not search.waiting


def test_through_the_session_table_answers_carry_what_the_limit_lets_out() -> None:
    table = SessionTable(LimitConcurrency(ListSearches(), 1))
    answer = table.start("exp-1", list_spec(3))
    assert creates(answer.actions) == ["trial-0"] and answer.progress == 0.0
    assert (answer.snapshot.method, answer.snapshot.version) == ("list", 3)
    assert table.start("exp-1", list_spec(3)) == answer  # a retried start: the same answer
    assert creates(table.handle("exp-1", 0, TrialExited("trial-0")).actions) == ["trial-1"]
    assert creates(table.handle("exp-1", 1, TrialExited("trial-1")).actions) == ["trial-2"]
    last = table.handle("exp-1", 2, TrialExited("trial-2"))
    assert last.actions == [Shutdown()] and last.progress == 1.0


def test_the_preview_shows_every_trial_whatever_the_limit() -> None:
    spec = list_spec(4, seed=2)
    assert LimitConcurrency(ListSearches(), 1).preview(spec) == ListSearches().preview(spec)


# --- the limit -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("searcher", "handed_out"),
    [
        ({}, 16),  # Determined's default
        ({"max_concurrent_trials": 3}, 3),
        ({"max_concurrent_trials": 3.0}, 3),  # numbers arrive as doubles
        ({"max_concurrent_trials": 0}, 20),
        ({"max_concurrent_trials": None}, 16),
    ],
)
def test_without_a_limit_each_search_reads_max_concurrent_trials(
    searcher: dict[str, Any], handed_out: int
) -> None:
    first = LimitConcurrency(ListSearches()).create(list_spec(20, **searcher)).initial_actions()
    assert len(creates(first)) == handed_out


def test_a_given_limit_wins_over_the_spec_and_the_default_can_be_changed() -> None:
    spec = list_spec(20, max_concurrent_trials=3)
    assert LimitConcurrency(ListSearches(), 5).create(spec).limit == 5
    assert LimitConcurrency(ListSearches(), default=4).create(list_spec(20)).limit == 4


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "searcher.max_concurrent_trials: must be >= 0, got -1"),
        (2.5, "searcher.max_concurrent_trials: must be an integer, got 2.5"),
        ("many", "searcher.max_concurrent_trials: must be an integer, got 'many'"),
        (True, "searcher.max_concurrent_trials: must be an integer, got True"),
    ],
)
def test_an_invalid_max_concurrent_trials_is_refused_naming_the_field(value: Any, message: str) -> None:
    table = SessionTable(LimitConcurrency(ListSearches()))
    with pytest.raises(InvalidSpec) as caught:
        table.start("exp-1", list_spec(max_concurrent_trials=value))
    assert str(caught.value) == message
    assert "exp-1" not in table


def test_negative_limits_are_refused() -> None:
    message = r"limit must be >= 0 \(0: no limit\), got -1"
    with pytest.raises(ValueError, match=message):
        LimitConcurrency(ListSearches(), -1)
    with pytest.raises(ValueError, match=message):
        ConcurrencyLimited(ListSearch(list_spec()), -1)


# --- Shutdown, StopTrial and SetTrialTarget meeting held-back trials --------------------------------


def test_a_shutdown_waits_behind_held_back_creates() -> None:
    search, first = limited(2, trials=4, shutdown_upfront=True)
    assert first == [create(0), create(1)]
    assert waiting_ids(search) == ["trial-2", "trial-3", "shutdown"]
    assert search.apply(TrialExited("trial-0")) == [create(2)]
    assert search.apply(TrialExited("trial-1")) == [create(3), Shutdown()]
    # With nothing held back it goes out at once.
    assert limited(0, trials=2, shutdown_upfront=True)[1] == [create(0), create(1), Shutdown()]


def test_stopping_a_waiting_trial_drops_it_and_tells_the_search_it_exited() -> None:
    search, _ = limited(1, trials=3)
    assert search.apply(validated("trial-0", stop="trial-1")) == []
    assert waiting_ids(search) == ["trial-2"]
    assert isinstance(search.inner, ListSearch) and search.inner.exited == ["trial-1"]
    assert search.progress() == pytest.approx(1 / 3)
    assert search.apply(TrialExited("trial-0")) == [create(2)]  # trial-1 never goes out
    assert search.apply(TrialExited("trial-2")) == [Shutdown()]


def test_dropping_the_last_create_lets_a_waiting_shutdown_out_with_the_next_exit() -> None:
    search, _ = limited(1, trials=3, shutdown_upfront=True)
    assert search.apply(validated("trial-0", stop="trial-2")) == []
    assert waiting_ids(search) == ["trial-1", "shutdown"]
    assert search.apply(TrialExited("trial-0")) == [create(1), Shutdown()]


def test_retargeting_a_waiting_trial_changes_the_create_it_goes_out_with() -> None:
    search, _ = limited(1, trials=2)
    assert search.apply(validated("trial-0", retarget="trial-1", length=50)) == []
    assert search.apply(TrialExited("trial-0")) == [create(1, target_length=50)]


def test_stop_and_target_for_running_trials_pass_through() -> None:
    search, _ = limited(1, trials=2)
    assert search.apply(validated("trial-0", stop="trial-0")) == [StopTrial("trial-0")]
    assert search.apply(validated("trial-0", retarget="trial-0", length=9)) == [SetTrialTarget("trial-0", 9)]
    assert search.running == {"trial-0"} and waiting_ids(search) == ["trial-1"]


# --- events for trials never handed out ------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (TrialCreated("trial-2"), "trial_created"),
        (ValidationCompleted("trial-2", {"loss": 1.0}), "validation_completed"),
        (TrialProgress("trial-2", 0.5), "trial_progress"),
        (TrialExitedEarly("trial-2", ExitReason.USER_CANCELED), "trial_exited_early"),
        (TrialExited("trial-2"), "trial_exited"),
    ],
)
def test_an_event_for_a_held_back_trial_is_refused_naming_the_field(event: Event, field: str) -> None:
    search, _ = limited(1, trials=3)
    before = search.to_bytes()
    with pytest.raises(InvalidEvent) as caught:
        search.apply(event)
    assert str(caught.value) == (
        f"event.{field}.request_id: trial 'trial-2' is held back by the concurrency limit and was "
        "never handed out"
    )
    assert search.to_bytes() == before


def test_a_refused_event_leaves_the_session_as_it_was() -> None:
    table = SessionTable(LimitConcurrency(ListSearches(), 1))
    table.start("exp-1", list_spec(3))
    with pytest.raises(InvalidEvent, match="held back"):
        table.handle("exp-1", 0, TrialExited("trial-1"))
    with pytest.raises(InvalidEvent, match="no trial 'trial-9'"):  # unknown ids: the search's refusal
        table.handle("exp-1", 0, TrialExited("trial-9"))
    assert creates(table.handle("exp-1", 0, TrialExited("trial-0")).actions) == ["trial-1"]


# --- snapshots -------------------------------------------------------------------------------------

# A run through every case: held-back creates, a retarget and a stop of waiting trials, a stop of a
# running one, a Shutdown waiting behind creates.
SCRIPT: list[Event] = [
    TrialCreated("trial-0"),
    validated("trial-0", retarget="trial-3", length=7),
    validated("trial-1", stop="trial-2"),
    validated("trial-1", stop="trial-1"),
    TrialExited("trial-1"),
    TrialExited("trial-0"),
    TrialExited("trial-3"),
    TrialExited("trial-4"),
]


def played(factory: LimitConcurrency) -> list[Answer]:
    table = SessionTable(factory)
    answers = [table.start("exp-1", list_spec(5, shutdown_upfront=True))]
    for seq, event in enumerate(SCRIPT):
        answers.append(table.handle("exp-1", seq, event))
    return answers


def test_the_script_holds_back_and_hands_out_as_expected() -> None:
    answers = played(LimitConcurrency(SteeredSearches(), 2))
    assert [a.actions for a in answers] == [
        [create(0), create(1)],
        [],
        [],
        [],
        [StopTrial("trial-1")],
        [create(3, target_length=7)],
        [create(4), Shutdown()],
        [],
        [],
    ]


@pytest.mark.parametrize("at", range(len(SCRIPT) + 1))
def test_a_restored_session_holds_back_what_the_original_did_and_goes_on_identically(at: int) -> None:
    original = played(LimitConcurrency(SteeredSearches(), 2))
    snapshot = original[at].snapshot

    # A factory with another limit: the snapshot's limit is the one that held trials back.
    factory = LimitConcurrency(SteeredSearches(), 5)
    table = SessionTable(factory)
    assert table.restore("exp-1", list_spec(5), snapshot) == original[at].progress
    for seq, event in enumerate(SCRIPT[at:], start=at):
        assert table.handle("exp-1", seq, event) == original[seq + 1]

    restored = factory.restore(snapshot)
    assert restored.limit == 2
    assert restored.to_bytes() == snapshot.state


def test_the_snapshot_state_holds_the_wrapper_beside_the_search_s_own_bytes() -> None:
    answers = played(LimitConcurrency(SteeredSearches(), 2))
    state = json.loads(answers[2].snapshot.state)  # after the retarget of trial-3
    assert state["concurrency"] == {
        "limit": 2,
        "running": ["trial-0", "trial-1"],
        "waiting": [
            {"create": dataclasses.asdict(create(2))},
            {"create": dataclasses.asdict(create(3, target_length=7))},
            {"create": dataclasses.asdict(create(4))},
            {"shutdown": {"cancel": False, "failure": False}},
        ],
    }
    inner = json.loads(base64.b64decode(state["search"]))
    assert inner["exited"] == [] and inner["shutdown"] is True


_DROP = object()


def with_state(snapshot: Snapshot, path: str, value: Any) -> Snapshot:
    """`snapshot` with the JSON value at dotted `path` of its state replaced (`_DROP`: removed)."""
    state = json.loads(snapshot.state)
    *parents, last = path.split(".")
    node = state
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is _DROP:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return dataclasses.replace(snapshot, state=json.dumps(state).encode())


WAITING_0 = "snapshot.state.concurrency.waiting[0]"
NOT_HELD = f"{WAITING_0}: not an action this wrapper holds back"
CORRUPT_STATES = [
    ("concurrency", _DROP, "snapshot.state.concurrency: must be an object"),
    ("concurrency", [], "snapshot.state.concurrency: must be an object"),
    ("concurrency.limit", _DROP, "snapshot.state.concurrency.limit: must be an integer >= 0, got None"),
    ("concurrency.limit", -1, "snapshot.state.concurrency.limit: must be an integer >= 0, got -1"),
    ("concurrency.limit", "2", "snapshot.state.concurrency.limit: must be an integer >= 0, got '2'"),
    ("concurrency.limit", True, "snapshot.state.concurrency.limit: must be an integer >= 0, got True"),
    ("concurrency.running", "trial-0", "snapshot.state.concurrency.running: must be a list of request ids"),
    ("concurrency.running", [0], "snapshot.state.concurrency.running: must be a list of request ids"),
    ("concurrency.waiting", {}, "snapshot.state.concurrency.waiting: must be a list of actions"),
    ("concurrency.waiting.0", 3, f"{WAITING_0}: must be an object"),
    ("concurrency.waiting.0", {"stop": {}}, f"{WAITING_0}: must be {{create: ...}} or {{shutdown: ...}}"),
    ("concurrency.waiting.0", {"create": [], "shutdown": {}}, f"{WAITING_0}: must be {{create: ...}} or "),
    ("concurrency.waiting.0.create", [], f"{WAITING_0}.create: must be an object"),
    ("concurrency.waiting.0.create.trial_seed", _DROP, NOT_HELD),
    ("concurrency.waiting.0.create.trial_seed", "2", NOT_HELD),
    ("concurrency.waiting.0.create.target_length", None, NOT_HELD),
    ("concurrency.waiting.0.create.request_id", 2, NOT_HELD),
    ("concurrency.waiting.0.create.hparams", [], NOT_HELD),
    ("concurrency.waiting.0.create.extra", 1, NOT_HELD),
    ("concurrency.waiting.3.shutdown.cancel", "yes", "snapshot.state.concurrency.waiting[3]: not an action"),
    ("concurrency.waiting.3.shutdown.extra", 1, "snapshot.state.concurrency.waiting[3]: not an action"),
    ("search", _DROP, "snapshot.state.search: must be the search's state in base64"),
    ("search", 1234, "snapshot.state.search: must be the search's state in base64"),
    ("search", "not base64!", "snapshot.state.search: must be the search's state in base64"),
    # Good base64 of bad bytes: the search's own refusal.
    ("search", base64.b64encode(b"{not json").decode(), "snapshot.state: not JSON"),
]


@pytest.mark.parametrize(("path", "value", "message"), CORRUPT_STATES)
def test_a_corrupt_state_is_refused_naming_the_path(path: str, value: Any, message: str) -> None:
    answers = played(LimitConcurrency(SteeredSearches(), 2))
    good = answers[2].snapshot  # two running, three creates and a Shutdown waiting
    table = SessionTable(LimitConcurrency(SteeredSearches(), 2))
    table.start("exp-1", list_spec(2))
    with pytest.raises(InvalidSnapshot) as caught:
        table.restore("exp-1", list_spec(5), with_state(good, path, value))
    assert str(caught.value).startswith(message)
    # The live session was not replaced.
    assert creates(table.handle("exp-1", 0, TrialExited("trial-0")).actions) == []


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (b"{not json", "snapshot.state: not a concurrency-limited search (Expecting"),
        (b"\xff", "snapshot.state: not a concurrency-limited search ("),
        (b"[]", "snapshot.state: not a concurrency-limited search (expected a JSON object)"),
        # The bare search's own state: a snapshot taken without the wrapper.
        (ListSearch(list_spec()).to_bytes(), "snapshot.state.concurrency: must be an object"),
    ],
)
def test_a_state_that_is_not_the_wrapper_s_is_refused(state: bytes, message: str) -> None:
    snapshot = Snapshot(seq=0, state=state, method="list", version=3)
    with pytest.raises(InvalidSnapshot) as caught:
        LimitConcurrency(ListSearches(), 2).restore(snapshot)
    assert str(caught.value).startswith(message)
