"""The real scheduler server over a real socket: conversion, errors and the cluster token."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cairn.scheduler.v1 import scheduler_pb2 as pb
from cairn.scheduler.v1 import scheduler_pb2_grpc
from services.common.channels import internal_channel
from services.common.server import ServiceServer
from services.scheduler.forecaster import Forecaster, forecast

CALL_TIMEOUT_S = 5.0
STARTUP_TIMEOUT_S = 20.0
REPO_ROOT = Path(__file__).resolve().parents[3]


def _ts(seconds: int) -> Timestamp:
    return Timestamp(seconds=seconds)


def _cluster_request() -> pb.ScheduleRequest:
    """Pool 'gpu' with preemption: a1 runs low-priority work on 2 of 4 slots, a2 is empty."""
    return pb.ScheduleRequest(
        pools=[
            pb.ResourcePool(
                name="gpu",
                fitting_policy=pb.FITTING_POLICY_BEST,
                preemption_enabled=True,
                default_priority=42,
            )
        ],
        agents=[
            pb.Agent(
                id="a1",
                resource_pool="gpu",
                enabled=True,
                slots=[
                    pb.Slot(id="0", enabled=True, allocation_id="low"),
                    pb.Slot(id="1", enabled=True, allocation_id="low"),
                    pb.Slot(id="2", enabled=True),
                    pb.Slot(id="3", enabled=True),
                ],
            ),
            pb.Agent(
                id="a2",
                resource_pool="gpu",
                enabled=True,
                slots=[pb.Slot(id=str(i), enabled=True) for i in range(4)],
            ),
        ],
        requests=[
            pb.AllocationRequest(
                allocation_id="low",
                resource_pool="gpu",
                slots_needed=2,
                priority=60,
                preemptible=True,
                job_id="exp-1",
                job_submitted_at=_ts(100),
                requested_at=_ts(100),
                placements=[pb.Placement(agent_id="a1", slot_ids=["0", "1"])],
            ),
            pb.AllocationRequest(
                allocation_id="two",
                resource_pool="gpu",
                slots_needed=2,
                job_id="exp-2",
                job_submitted_at=_ts(200),
                requested_at=_ts(201),
            ),
            pb.AllocationRequest(
                allocation_id="four",
                resource_pool="gpu",
                slots_needed=4,
                job_id="exp-3",
                job_submitted_at=_ts(200),
                requested_at=_ts(202),
            ),
            pb.AllocationRequest(
                allocation_id="urgent",
                resource_pool="gpu",
                slots_needed=4,
                priority=1,
                job_id="exp-4",
                job_submitted_at=_ts(300),
                requested_at=_ts(300),
            ),
            pb.AllocationRequest(allocation_id="lost", resource_pool="cpu", slots_needed=1),
        ],
    )


@contextmanager
def _stub(server: ServiceServer, token: str | None) -> Iterator[scheduler_pb2_grpc.SchedulerServiceStub]:
    channel = internal_channel(f"127.0.0.1:{server.port}", token)
    try:
        yield scheduler_pb2_grpc.SchedulerServiceStub(channel)
    finally:
        channel.close()


@pytest.fixture
def stub(
    scheduler_server: ServiceServer, scheduler_cluster_token: str
) -> Iterator[scheduler_pb2_grpc.SchedulerServiceStub]:
    with _stub(scheduler_server, scheduler_cluster_token) as authorized:
        yield authorized


def test_schedule_over_grpc(stub: scheduler_pb2_grpc.SchedulerServiceStub) -> None:
    response = stub.Schedule(_cluster_request(), timeout=CALL_TIMEOUT_S)
    # "urgent" (priority 1) takes the empty agent; "two" then fills a1's free half; "four" finds
    # nothing free, and with preemption on it preempts nothing it could use ("low" frees only 2).
    assert [
        (a.allocation_id, [(p.agent_id, list(p.slot_ids)) for p in a.placements])
        for a in response.assignments
    ] == [
        ("urgent", [("a2", ["0", "1", "2", "3"])]),
        ("two", [("a1", ["2", "3"])]),
    ]
    assert list(response.preemptions) == []
    assert [(w.allocation_id, w.reason, w.queue_position) for w in response.waiting] == [
        ("lost", "resource pool 'cpu' does not exist", 0),
        ("four", "needs 4 slots; no agent in pool 'gpu' has a free slot", 0),
    ]


def test_preemption_over_grpc(stub: scheduler_pb2_grpc.SchedulerServiceStub) -> None:
    request = _cluster_request()
    # Fill a2 with non-preemptible work: "urgent" can only get room on a1 by preempting "low".
    request.agents[1].ClearField("slots")
    request.agents[1].slots.extend([pb.Slot(id="0", enabled=True, allocation_id="pinned")])
    request.requests.append(
        pb.AllocationRequest(
            allocation_id="pinned",
            resource_pool="gpu",
            slots_needed=1,
            priority=1,
            placements=[pb.Placement(agent_id="a2", slot_ids=["0"])],
        )
    )
    response = stub.Schedule(request, timeout=CALL_TIMEOUT_S)
    assert [(p.allocation_id, p.for_allocation_id) for p in response.preemptions] == [("low", "urgent")]
    assert [a.allocation_id for a in response.assignments] == []


def test_invalid_input_is_invalid_argument_naming_the_field(
    stub: scheduler_pb2_grpc.SchedulerServiceStub,
) -> None:
    request = _cluster_request()
    request.requests[3].slots_needed = -2
    with pytest.raises(grpc.RpcError) as caught:
        stub.Schedule(request, timeout=CALL_TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "requests[3].slots_needed: must be >= 0"


def test_a_session_over_grpc_takes_changes_and_answers_what_schedule_would(
    stub: scheduler_pb2_grpc.SchedulerServiceStub,
) -> None:
    whole = _cluster_request()
    snapshot = pb.ScheduleChangesRequest(
        session_id="m1",
        version=1,
        snapshot=True,
        pools=whole.pools,
        agents=whole.agents,
        requests=whole.requests,
    )
    first = stub.ScheduleChanges(snapshot, timeout=CALL_TIMEOUT_S)
    expected = stub.Schedule(whole, timeout=CALL_TIMEOUT_S)
    assert first.applied
    assert list(first.decision.assignments) == list(expected.assignments)
    assert {(w.allocation_id, w.reason) for w in first.decision.waiting} == {
        (w.allocation_id, w.reason) for w in expected.waiting
    }
    # "urgent" and "two" are placed as decided: the next answer has no news for the waiting.
    placed = {a.allocation_id: a for a in first.decision.assignments}
    changed = [
        pb.AllocationRequest(
            allocation_id=r.allocation_id,
            resource_pool=r.resource_pool,
            slots_needed=r.slots_needed,
            priority=r.priority,
            placements=placed[r.allocation_id].placements,
        )
        for r in whole.requests
        if r.allocation_id in placed
    ]
    second = stub.ScheduleChanges(
        pb.ScheduleChangesRequest(session_id="m1", base_version=1, version=2, requests=changed),
        timeout=CALL_TIMEOUT_S,
    )
    assert second.applied
    assert list(second.decision.assignments) == []
    assert list(second.decision.waiting) == []
    # Changes on top of a version the scheduler does not hold are not applied: send a snapshot.
    stale = stub.ScheduleChanges(
        pb.ScheduleChangesRequest(session_id="m1", base_version=1, version=2), timeout=CALL_TIMEOUT_S
    )
    assert not stale.applied
    unknown = stub.ScheduleChanges(
        pb.ScheduleChangesRequest(session_id="other", base_version=4, version=5), timeout=CALL_TIMEOUT_S
    )
    assert not unknown.applied


def test_a_contradicting_change_is_invalid_argument_and_ends_the_session(
    stub: scheduler_pb2_grpc.SchedulerServiceStub,
) -> None:
    whole = _cluster_request()
    stub.ScheduleChanges(
        pb.ScheduleChangesRequest(
            session_id="m2",
            version=1,
            snapshot=True,
            pools=whole.pools,
            agents=whole.agents,
            requests=whole.requests,
        ),
        timeout=CALL_TIMEOUT_S,
    )
    bad = pb.AllocationRequest(
        allocation_id="x",
        resource_pool="gpu",
        slots_needed=1,
        placements=[pb.Placement(agent_id="nope", slot_ids=["0"])],
    )
    with pytest.raises(grpc.RpcError) as caught:
        stub.ScheduleChanges(
            pb.ScheduleChangesRequest(session_id="m2", base_version=1, version=2, requests=[bad]),
            timeout=CALL_TIMEOUT_S,
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "requests[0].placements[0].agent_id: unknown agent 'nope'"
    gone = stub.ScheduleChanges(
        pb.ScheduleChangesRequest(session_id="m2", base_version=1, version=2), timeout=CALL_TIMEOUT_S
    )
    assert not gone.applied


def test_unknown_fitting_policy_is_invalid_argument(stub: scheduler_pb2_grpc.SchedulerServiceStub) -> None:
    request = _cluster_request()
    request.pools[0].fitting_policy = 7  # type: ignore[assignment]
    with pytest.raises(grpc.RpcError) as caught:
        stub.Schedule(request, timeout=CALL_TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "pools[0].fitting_policy: unknown value 7"


@pytest.mark.parametrize("token", [None, "wrong-token"], ids=["missing", "wrong"])
def test_cluster_token_is_required(scheduler_server: ServiceServer, token: str | None) -> None:
    with _stub(scheduler_server, token) as stub:
        with pytest.raises(grpc.RpcError) as caught:
            stub.Schedule(_cluster_request(), timeout=CALL_TIMEOUT_S)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_health_answers_without_the_token(scheduler_server: ServiceServer) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{scheduler_server.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(
            health_pb2.HealthCheckRequest(service="cairn.scheduler.v1.SchedulerService"),
            timeout=CALL_TIMEOUT_S,
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_no_token_configured_means_no_token_needed(open_scheduler_server: ServiceServer) -> None:
    with _stub(open_scheduler_server, None) as stub:
        response = stub.Schedule(pb.ScheduleRequest(), timeout=CALL_TIMEOUT_S)
        assert response == pb.ScheduleResponse()


def test_entry_point_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "clients" / "python")]),
        "CAIRN_CLUSTER_TOKEN": "t0k",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.scheduler",
            "--port",
            "0",
            "--ready-file",
            str(ready),
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "scheduler did not write its ready file"
        info = json.loads(ready.read_text())
        assert info["pid"] == proc.pid
        channel = internal_channel(f"127.0.0.1:{info['grpc_port']}", "t0k")
        try:
            reply = scheduler_pb2_grpc.SchedulerServiceStub(channel).Schedule(
                _cluster_request(), timeout=CALL_TIMEOUT_S
            )
        finally:
            channel.close()
        assert [a.allocation_id for a in reply.assignments] == ["urgent", "two"]
        # A forecast starts the forecast worker, a child of the scheduler's; it ends with it.
        channel = internal_channel(f"127.0.0.1:{info['grpc_port']}", "t0k")
        try:
            forecast_reply = scheduler_pb2_grpc.SchedulerServiceStub(channel).PredictStarts(
                _forecast_request(), timeout=60
            )
        finally:
            channel.close()
        assert [p.start_in_seconds for p in forecast_reply.predictions] == [10.0]
        workers = _children(proc.pid)
        assert workers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STARTUP_TIMEOUT_S) == 0
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=STARTUP_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()


def _children(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _forecast_request() -> pb.PredictStartsRequest:
    """One slot held by "r" for 10 s more; "q" waits for it."""
    return pb.PredictStartsRequest(
        state=pb.ScheduleRequest(
            pools=[pb.ResourcePool(name="p")],
            agents=[
                pb.Agent(
                    id="a",
                    resource_pool="p",
                    enabled=True,
                    slots=[pb.Slot(id="0", enabled=True, allocation_id="r")],
                )
            ],
            requests=[
                pb.AllocationRequest(
                    allocation_id="r",
                    resource_pool="p",
                    slots_needed=1,
                    placements=[pb.Placement(agent_id="a", slot_ids=["0"])],
                ),
                pb.AllocationRequest(allocation_id="q", resource_pool="p", slots_needed=1),
            ],
        ),
        expected_seconds={"r": 10.0},
        horizon_seconds=3600,
        max_steps=10,
    )


def test_a_forecast_over_grpc_comes_from_the_niced_worker(
    stub: scheduler_pb2_grpc.SchedulerServiceStub,
) -> None:
    answer = stub.PredictStarts(_forecast_request(), timeout=60)
    assert [(p.allocation_id, p.start_in_seconds, p.after_allocation_id) for p in answer.predictions] == [
        ("q", 10.0, "r")
    ]
    refused = _forecast_request()
    refused.max_steps = 0
    with pytest.raises(grpc.RpcError) as caught:
        stub.PredictStarts(refused, timeout=60)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("max_steps: ")


def test_the_forecaster_runs_at_a_lower_priority_and_outlives_its_worker() -> None:
    forecaster = Forecaster(niceness=5)
    try:
        assert forecaster.predict(_forecast_request()) == forecast(_forecast_request())
        worker = forecaster._worker()
        assert worker.submit(os.nice, 0).result(timeout=60) >= os.nice(0) + 5
        # The worker dies: the next forecast starts another.
        with contextlib.suppress(Exception):
            worker.submit(os._exit, 1).result(timeout=60)
        assert forecaster.predict(_forecast_request()) == forecast(_forecast_request())
    finally:
        forecaster.close()
