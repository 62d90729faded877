"""The real searcher server over a real socket: the contract's calls, its status codes, restoring
into a fresh server, the cluster token, and the `python -m services.searcher` entry point."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.searcher.v1 import searcher_pb2_grpc
from services.common.channels import internal_channel
from services.common.server import ServiceServer
from services.searcher.server import serve
from tests.unit.searcher.conftest import CLUSTER_TOKEN

TIMEOUT_S = 10.0
HPARAMS = {
    "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
    "layers": {"type": "int", "minval": 1, "maxval": 8},
    "opt": {"name": {"type": "categorical", "vals": ["sgd", "adam"]}, "momentum": 0.9},
    "global_batch_size": 64,
}
REPO_ROOT = Path(__file__).resolve().parents[3]


def struct(values: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(values)
    return message


def search_spec(name: str = "random", seed: int = 42, **searcher: Any) -> pb.SearchSpec:
    section = {"name": name, "metric": "loss", "smaller_is_better": True, **searcher}
    if name == "random":
        section.setdefault("max_trials", 3)
        section.setdefault("max_concurrent_trials", 2)
    return pb.SearchSpec(searcher=struct(section), hyperparameters=struct(HPARAMS), seed=seed)


def created(response: pb.SearcherResponse) -> list[pb.CreateTrial]:
    return [a.create for a in response.actions if a.WhichOneof("action") == "create"]


def event(**kind: Any) -> pb.SearcherEvent:
    return pb.SearcherEvent(**kind)


@contextlib.contextmanager
def stub_for(
    server: ServiceServer, token: str | None = None
) -> Iterator[searcher_pb2_grpc.SearcherServiceStub]:
    channel = internal_channel(f"127.0.0.1:{server.port}", token)
    try:
        yield searcher_pb2_grpc.SearcherServiceStub(channel)
    finally:
        channel.close()


@pytest.fixture
def stub(searcher_server: ServiceServer) -> Iterator[searcher_pb2_grpc.SearcherServiceStub]:
    with stub_for(searcher_server) as client:
        yield client


def code_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error = caught.value
    assert isinstance(error, grpc.Call)
    return error.code(), error.details() or ""


def test_start_and_events_over_the_wire(stub: searcher_pb2_grpc.SearcherServiceStub) -> None:
    start = stub.StartSession(
        pb.StartSessionRequest(session_id="exp-1", spec=search_spec()), timeout=TIMEOUT_S
    )
    trials = created(start)
    assert len(trials) == 2
    assert start.snapshot.seq == 0 and start.snapshot.method == "random" and start.snapshot.version == 1
    hparams = json_format.MessageToDict(trials[0].hparams)
    assert set(hparams) == {"lr", "layers", "opt", "global_batch_size"}
    assert float(hparams["layers"]).is_integer() and 1 <= hparams["layers"] <= 8
    assert hparams["global_batch_size"] == 64 and hparams["opt"]["momentum"] == 0.9
    assert all(0 <= t.trial_seed < 2**31 and t.target_length == 0 for t in trials)

    seq = 0
    for trial in trials:
        answer = stub.HandleEvent(
            pb.HandleEventRequest(
                session_id="exp-1",
                after_seq=seq,
                event=event(trial_created=pb.TrialCreated(request_id=trial.request_id)),
            ),
            timeout=TIMEOUT_S,
        )
        seq += 1
        assert answer.snapshot.seq == seq and not answer.actions
    metrics = struct({"loss": 0.25, "batches": 100})
    answer = stub.HandleEvent(
        pb.HandleEventRequest(
            session_id="exp-1",
            after_seq=seq,
            event=event(
                validation_completed=pb.ValidationCompleted(
                    request_id=trials[0].request_id, metrics=metrics, steps_completed=100
                )
            ),
        ),
        timeout=TIMEOUT_S,
    )
    seq += 1
    answer = stub.HandleEvent(
        pb.HandleEventRequest(
            session_id="exp-1",
            after_seq=seq,
            event=event(trial_progress=pb.TrialProgress(request_id=trials[0].request_id, progress=0.5)),
        ),
        timeout=TIMEOUT_S,
    )
    seq += 1
    assert answer.progress == pytest.approx(0.25)
    answer = stub.HandleEvent(
        pb.HandleEventRequest(
            session_id="exp-1",
            after_seq=seq,
            event=event(
                trial_exited_early=pb.TrialExitedEarly(
                    request_id=trials[1].request_id, reason=pb.TrialExitedEarly.REASON_ERRORED
                )
            ),
        ),
        timeout=TIMEOUT_S,
    )
    seq += 1
    answer = stub.HandleEvent(
        pb.HandleEventRequest(
            session_id="exp-1",
            after_seq=seq,
            event=event(trial_exited=pb.TrialExited(request_id=trials[1].request_id)),
        ),
        timeout=TIMEOUT_S,
    )
    assert len(created(answer)) == 1  # the third and last trial
    stub.CloseSession(pb.CloseSessionRequest(session_id="exp-1"), timeout=TIMEOUT_S)
    stub.CloseSession(pb.CloseSessionRequest(session_id="exp-1"), timeout=TIMEOUT_S)


def test_status_codes(stub: searcher_pb2_grpc.SearcherServiceStub) -> None:
    start = stub.StartSession(
        pb.StartSessionRequest(session_id="exp-1", spec=search_spec()), timeout=TIMEOUT_S
    )
    rid = created(start)[0].request_id
    on_created = event(trial_created=pb.TrialCreated(request_id=rid))

    code, details = code_of(
        lambda: stub.HandleEvent(
            pb.HandleEventRequest(session_id="nope", event=on_created), timeout=TIMEOUT_S
        )
    )
    assert code == grpc.StatusCode.NOT_FOUND and "'nope' not found" in details

    code, details = code_of(
        lambda: stub.HandleEvent(
            pb.HandleEventRequest(session_id="exp-1", after_seq=5, event=on_created), timeout=TIMEOUT_S
        )
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "seq 0" in details and "seq 5" in details

    code, details = code_of(
        lambda: stub.StartSession(
            pb.StartSessionRequest(session_id="exp-2", spec=search_spec(name="foo")), timeout=TIMEOUT_S
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == (
        "searcher.name: unknown searcher 'foo' "
        "(this searcher runs: adaptive_asha, async_halving, grid, random, single)"
    )

    not_a_number = search_spec()
    not_a_number.hyperparameters.fields["lr"].struct_value.fields["minval"].number_value = float("nan")
    code, details = code_of(
        lambda: stub.StartSession(
            pb.StartSessionRequest(session_id="exp-2", spec=not_a_number), timeout=TIMEOUT_S
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == "hyperparameters.lr.minval: must be a finite number, got nan"

    code, details = code_of(
        lambda: stub.HandleEvent(
            pb.HandleEventRequest(session_id="exp-1", event=pb.SearcherEvent()), timeout=TIMEOUT_S
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("event: must set one of")

    unspecified = event(trial_exited_early=pb.TrialExitedEarly(request_id=rid))
    code, details = code_of(
        lambda: stub.HandleEvent(
            pb.HandleEventRequest(session_id="exp-1", event=unspecified), timeout=TIMEOUT_S
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("event.trial_exited_early.reason")

    # A retried start answers the same; a different one is refused.
    again = stub.StartSession(
        pb.StartSessionRequest(session_id="exp-1", spec=search_spec()), timeout=TIMEOUT_S
    )
    assert again == start
    code, _ = code_of(
        lambda: stub.StartSession(
            pb.StartSessionRequest(session_id="exp-1", spec=search_spec(seed=7)), timeout=TIMEOUT_S
        )
    )
    assert code == grpc.StatusCode.ALREADY_EXISTS

    code, details = code_of(
        lambda: stub.RestoreSession(
            pb.RestoreSessionRequest(
                session_id="exp-1",
                spec=search_spec(),
                snapshot=pb.Snapshot(state=b"{}", method="random", version=9),
            ),
            timeout=TIMEOUT_S,
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("snapshot.version")


def test_restore_into_a_fresh_server_continues_the_search() -> None:
    first = serve("127.0.0.1", 0, None)
    try:
        with stub_for(first) as client:
            start = client.StartSession(
                pb.StartSessionRequest(session_id="exp-9", spec=search_spec()), timeout=TIMEOUT_S
            )
            a, b = (t.request_id for t in created(start))
            on_created = event(trial_created=pb.TrialCreated(request_id=a))
            latest = client.HandleEvent(
                pb.HandleEventRequest(session_id="exp-9", after_seq=0, event=on_created), timeout=TIMEOUT_S
            )
            exit_a = pb.HandleEventRequest(
                session_id="exp-9", after_seq=1, event=event(trial_exited=pb.TrialExited(request_id=a))
            )
            expected = client.HandleEvent(exit_a, timeout=TIMEOUT_S)
    finally:
        first.stop(grace=0)

    # The searcher restarted empty: the master is told NOT_FOUND, restores, and sends the event again.
    second = serve("127.0.0.1", 0, None)
    try:
        with stub_for(second) as client:
            code, _ = code_of(lambda: client.HandleEvent(exit_a, timeout=TIMEOUT_S))
            assert code == grpc.StatusCode.NOT_FOUND
            restored = client.RestoreSession(
                pb.RestoreSessionRequest(session_id="exp-9", spec=search_spec(), snapshot=latest.snapshot),
                timeout=TIMEOUT_S,
            )
            assert restored.progress == latest.progress
            assert client.HandleEvent(exit_a, timeout=TIMEOUT_S) == expected
            assert len(created(expected)) == 1 and b not in {t.request_id for t in created(expected)}
    finally:
        second.stop(grace=0)


def test_preview(stub: searcher_pb2_grpc.SearcherServiceStub) -> None:
    spec = search_spec(name="grid", max_length={"epochs": 2})
    spec.hyperparameters.Clear()
    spec.hyperparameters.update({"a": {"type": "int", "minval": 1, "maxval": 3, "count": 3}, "b": [1, 2]})
    preview = stub.PreviewSearch(pb.PreviewSearchRequest(spec=spec), timeout=TIMEOUT_S)
    assert preview.unit == "epochs"
    assert [json_format.MessageToDict(t.hparams)["a"] for t in preview.trials] == [3, 2, 1]
    assert all(list(t.lengths) == [2] and t.bracket == 0 for t in preview.trials)

    session = stub.StartSession(pb.StartSessionRequest(session_id="p", spec=spec), timeout=TIMEOUT_S)
    assert [t.request_id for t in created(session)] == [t.request_id for t in preview.trials]


def test_cluster_token_is_required_when_configured(guarded_searcher_server: ServiceServer) -> None:
    request = pb.PreviewSearchRequest(spec=search_spec(name="single"))
    for token in (None, "wrong-token"):
        with stub_for(guarded_searcher_server, token) as client:
            code, details = code_of(lambda: client.PreviewSearch(request, timeout=TIMEOUT_S))
            assert code == grpc.StatusCode.UNAUTHENTICATED and "cluster token" in details
    with stub_for(guarded_searcher_server, CLUSTER_TOKEN) as client:
        assert len(client.PreviewSearch(request, timeout=TIMEOUT_S).trials) == 1
    # Health checks stay open.
    channel = grpc.insecure_channel(f"127.0.0.1:{guarded_searcher_server.port}")
    try:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        channel.close()


def test_entry_point_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    env = {**os.environ, "CAIRN_CLUSTER_TOKEN": CLUSTER_TOKEN}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.searcher",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            "--log-format",
            "json",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else "exited"
            assert time.monotonic() < deadline, "the searcher did not become ready"
            time.sleep(0.05)
        port = json.loads(ready.read_text())["grpc_port"]
        channel = internal_channel(f"127.0.0.1:{port}", CLUSTER_TOKEN)
        try:
            client = searcher_pb2_grpc.SearcherServiceStub(channel)
            answer = client.StartSession(
                pb.StartSessionRequest(session_id="exp-1", spec=search_spec(name="single")), timeout=TIMEOUT_S
            )
            assert len(created(answer)) == 1
        finally:
            channel.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


def test_handle_events_applies_a_batch_and_bounds_it(stub: searcher_pb2_grpc.SearcherServiceStub) -> None:
    start = stub.StartSession(
        pb.StartSessionRequest(session_id="exp-b", spec=search_spec()), timeout=TIMEOUT_S
    )
    events = [event(trial_created=pb.TrialCreated(request_id=t.request_id)) for t in created(start)]
    answer = stub.HandleEvents(
        pb.HandleEventsRequest(session_id="exp-b", after_seq=0, events=events), timeout=TIMEOUT_S
    )
    assert answer.snapshot.seq == len(events) and not answer.actions
    too_many = [events[0]] * 10_001
    assert code_of(
        lambda: stub.HandleEvents(
            pb.HandleEventsRequest(session_id="exp-b", after_seq=len(events), events=too_many),
            timeout=TIMEOUT_S,
        )
    ) == (grpc.StatusCode.INVALID_ARGUMENT, "events: at most 10000 events in one call, got 10001")
    # A refused event refuses the batch, naming its index.
    assert code_of(
        lambda: stub.HandleEvents(
            pb.HandleEventsRequest(
                session_id="exp-b",
                after_seq=len(events),
                events=[events[0], pb.SearcherEvent()],
            ),
            timeout=TIMEOUT_S,
        )
    )[1].startswith("events[1]: event: must set one of")
