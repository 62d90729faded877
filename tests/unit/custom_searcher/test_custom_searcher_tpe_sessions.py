"""Sessions of the TPE searcher over gRPC: sequence numbers, NOT_FOUND and restore (into a restarted
process), snapshot/restore equivalence, retried starts, closing, and refused events."""

from __future__ import annotations

import functools
import json
from typing import Any

import grpc

from cairn.searcher.v1 import searcher_pb2 as pb
from tests.unit.custom_searcher.conftest import SearcherProcess
from tests.unit.custom_searcher.tpe_search_driver import (
    CALL_TIMEOUT_S,
    SearchDriver,
    creates,
    hparams_of,
    rpc_error,
    state_of,
    tpe_spec,
)

SPACE: dict[str, Any] = {
    "x": {"type": "double", "minval": -5.0, "maxval": 5.0},
    "n": {"type": "int", "minval": 1, "maxval": 20},
    "group": {"lr": {"type": "log", "minval": -5, "maxval": -1, "base": 10}},
    "kind": {"type": "categorical", "vals": ["a", "b", "c"]},
}


def objective(hparams: dict[str, Any]) -> float:
    return (hparams["x"] - 1.0) ** 2 + abs(hparams["n"] - 7) + ["a", "b", "c"].index(hparams["kind"])


def created_event(request_id: str) -> pb.SearcherEvent:
    return pb.SearcherEvent(trial_created=pb.TrialCreated(request_id=request_id))


def test_an_event_after_the_wrong_seq_is_refused_and_changes_nothing(tpe_searcher: SearcherProcess) -> None:
    driver = SearchDriver(tpe_searcher.stub, tpe_spec(max_trials=3))
    driver.start()
    rid = driver.created[0].request_id
    driver.trial_created(rid)
    for stale in (0, 5):
        error = rpc_error(functools.partial(driver.send, created_event(rid), after_seq=stale))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"is at seq 1, but the event follows seq {stale}" in str(error.details())
    assert driver.exited(rid).snapshot.seq == 2


def test_an_unknown_session_is_not_found_until_restored(tpe_searcher: SearcherProcess) -> None:
    original = SearchDriver(tpe_searcher.stub, tpe_spec(SPACE, max_trials=4))
    original.start()
    original.run_trial(original.open[0], objective)
    assert original.last is not None
    snapshot = original.last.snapshot

    # The master knows a session this process never saw (it restarted): it is sent to restore.
    elsewhere = SearchDriver(tpe_searcher.stub, original.spec)
    error = rpc_error(
        lambda: elsewhere.send(created_event(original.open[0].request_id), after_seq=snapshot.seq)
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert elsewhere.session_id in str(error.details())

    restored = elsewhere.restore(snapshot)
    assert restored.progress == 0.25
    elsewhere.open = list(original.open)
    elsewhere.run_to_shutdown(objective)
    assert elsewhere.shutdown == pb.Shutdown()
    assert elsewhere.last is not None and elsewhere.last.progress == 1.0


def test_a_restored_session_suggests_what_its_unrestored_twin_does(
    tpe_searcher: SearcherProcess, fresh_tpe_searcher: SearcherProcess
) -> None:
    spec = tpe_spec(SPACE, seed=31, max_trials=16, max_concurrent_trials=3, n_startup_trials=4)
    twin = SearchDriver(tpe_searcher.stub, spec)
    twin.start()
    # Past the random start, with trials still open (pending asks) and values already reported.
    for _ in range(7):
        twin.run_trial(twin.open[0], objective)
    twin.validated(twin.open[0].request_id, {"loss": 0.5})
    assert twin.last is not None
    snapshot = twin.last.snapshot
    statuses = [t["status"] for t in state_of(twin.last)["trials"]]
    assert statuses.count("complete") == 7 and statuses.count("running") == 3

    # Restored into another process, as after a restart of the searcher.
    restored = SearchDriver(fresh_tpe_searcher.stub, spec, session_id=twin.session_id)
    restored.restore(snapshot)
    restored.open = list(twin.open)
    for _ in range(20):
        if not twin.open:
            break
        rid = twin.open[0].request_id
        twin_answer, restored_answer = twin.exited(rid), restored.exited(rid)
        assert [c.request_id for c in creates(restored_answer)] == [
            c.request_id for c in creates(twin_answer)
        ]
        assert [hparams_of(c) for c in creates(restored_answer)] == [
            hparams_of(c) for c in creates(twin_answer)
        ]
        assert restored_answer.snapshot == twin_answer.snapshot
        for create in creates(twin_answer):
            loss = {"loss": objective(hparams_of(create))}
            assert (
                restored.validated(create.request_id, loss).snapshot
                == twin.validated(create.request_id, loss).snapshot
            )
    assert twin.shutdown is not None and restored.shutdown == twin.shutdown
    assert len(twin.created) == 16


def test_a_retried_start_gets_the_same_answer_and_a_different_one_is_refused(
    tpe_searcher: SearcherProcess,
) -> None:
    driver = SearchDriver(tpe_searcher.stub, tpe_spec(max_trials=5, seed=3))
    first = driver.start()
    again = driver.start()
    assert again == first

    other = pb.StartSessionRequest(session_id=driver.session_id, spec=tpe_spec(max_trials=5, seed=4))
    error = rpc_error(lambda: tpe_searcher.stub.StartSession(other, timeout=CALL_TIMEOUT_S))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS

    driver.trial_created(driver.created[0].request_id)
    error = rpc_error(driver.start)
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "at seq 1" in str(error.details())


def test_a_closed_session_is_gone(tpe_searcher: SearcherProcess) -> None:
    driver = SearchDriver(tpe_searcher.stub, tpe_spec())
    driver.start()
    close = pb.CloseSessionRequest(session_id=driver.session_id)
    tpe_searcher.stub.CloseSession(close, timeout=CALL_TIMEOUT_S)
    tpe_searcher.stub.CloseSession(close, timeout=CALL_TIMEOUT_S)  # closing twice is fine
    error = rpc_error(lambda: driver.trial_created(driver.created[0].request_id))
    assert error.code() == grpc.StatusCode.NOT_FOUND


def test_refused_events_leave_the_session_as_it_was(tpe_searcher: SearcherProcess) -> None:
    driver = SearchDriver(tpe_searcher.stub, tpe_spec(max_trials=3))
    before = driver.start().snapshot
    refused = [
        (pb.SearcherEvent(trial_exited=pb.TrialExited(request_id="nobody")), "event.trial_exited.request_id"),
        (pb.SearcherEvent(trial_created=pb.TrialCreated()), "event.trial_created.request_id: required"),
        (pb.SearcherEvent(), "event: must set one of"),
        (
            pb.SearcherEvent(trial_exited_early=pb.TrialExitedEarly(request_id=driver.created[0].request_id)),
            "event.trial_exited_early.reason",
        ),
    ]
    for event, message in refused:
        error = rpc_error(functools.partial(driver.send, event))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in str(error.details())
    # Still at seq 0, with the same state.
    assert driver.trial_created(driver.created[0].request_id).snapshot.seq == 1
    assert json.loads(before.state)["trials"][0]["created"] is False


def test_a_bad_snapshot_is_refused(tpe_searcher: SearcherProcess) -> None:
    driver = SearchDriver(tpe_searcher.stub, tpe_spec())
    good = driver.start().snapshot
    state = json.loads(good.state)
    state["trials"][0]["params"]["layers"] = 99
    bad = [
        (
            pb.Snapshot(seq=0, state=good.state, method="random", version=1),
            "this searcher reads method 'tpe'",
        ),
        (pb.Snapshot(seq=0, state=b"{not json", method="tpe", version=1), "snapshot.state: not JSON"),
        (pb.Snapshot(seq=3, state=good.state, method="tpe", version=1), "snapshot.seq: 3"),
        (
            pb.Snapshot(seq=0, state=json.dumps(state).encode(), method="tpe", version=1),
            "snapshot.state.trials[0].params.layers",
        ),
    ]
    for snapshot, message in bad:
        error = rpc_error(functools.partial(driver.restore, snapshot))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in str(error.details())
    # The live session was not replaced.
    assert driver.trial_created(driver.created[0].request_id).snapshot.seq == 1
