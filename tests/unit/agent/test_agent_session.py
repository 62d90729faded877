"""The agent's session with the master: Hello, Welcome, ready file, heartbeats, shutdown, refusal."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cairn.agent.v1 import agent_pb2 as apb
from services.common.metadata import CLUSTER_TOKEN_KEY
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import AgentProcess, python_command, wait_terminated


def token_file(folder: Path) -> Path:
    """The token where the agent reads it: an owner-only file (never on its command line)."""
    path = folder / "cluster-token"
    path.write_text("s3cret\n")
    path.chmod(0o600)
    return path


def test_hello_declares_cpu_slots_with_stable_uuids_across_restarts(
    store: MasterStore, launch_agent: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    master = MasterServer(store, expected_token="s3cret")
    try:
        agent = launch_agent(
            master.address,
            "--cluster-token-file",
            str(token_file(tmp_path)),
            "--resource-pool",
            "pool-a",
            slots=3,
        )
        ready = agent.wait_ready()
        assert ready["agent_id"] == "agent-1"
        assert ready["pid"] == agent.proc.pid
        port = int(str(ready["grpc_port"]))
        assert port > 0

        stream = master.double.wait_connected()
        hello = stream.hello
        assert stream.metadata[CLUSTER_TOKEN_KEY] == "s3cret"
        assert hello.agent_id == "agent-1"
        assert hello.resource_pool == "pool-a"
        assert hello.runtime == "process"
        assert hello.reconnect is False
        assert hello.version
        assert hello.hostname
        assert hello.HasField("boot_time")
        assert all(not a.startswith("127.") for a in hello.addresses)
        assert not hello.containers
        assert [s.id for s in hello.slots] == ["0", "1", "2"]
        assert {s.type for s in hello.slots} == {apb.DEVICE_TYPE_CPU}
        assert [s.index for s in hello.slots] == [0, 1, 2]
        assert all(s.brand for s in hello.slots)
        assert all(s.memory_bytes == 0 for s in hello.slots)
        # CPU slots: no device to fail, nowhere known to sit.
        assert all(not s.HasField("fault") for s in hello.slots)
        assert {(s.topology.numa_node, s.topology.nvlink_domain) for s in hello.slots} == {(-1, -1)}
        first_uuids = [s.uuid for s in hello.slots]
        assert len(set(first_uuids)) == 3

        # The agent's own server answers health checks.
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING

        assert agent.stop() == 0
        again = launch_agent(
            master.address,
            "--cluster-token-file",
            str(token_file(tmp_path)),
            "--resource-pool",
            "pool-a",
            slots=3,
        )
        again.wait_ready()
        second = master.double.wait_connected(2).hello
        assert [s.uuid for s in second.slots] == first_uuids
        assert second.boot_time.ToNanoseconds() > hello.boot_time.ToNanoseconds()
        # A new process: not a reconnect.
        assert second.reconnect is False
    finally:
        master.stop()


def test_heartbeats_follow_the_welcome_interval(
    master: MasterServer, launch_agent: Callable[..., AgentProcess]
) -> None:
    launch_agent(master.address)
    stream = master.double.wait_connected()
    wait_until(lambda: len(stream.of_kind("heartbeat")) >= 4, 5, "four heartbeats")
    beats = stream.of_kind("heartbeat")
    seqs = [m.heartbeat.seq for m in beats]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    times = [m.heartbeat.sent_at.ToNanoseconds() / 1e9 for m in beats[:4]]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Welcome says 200 ms.
    assert all(0.1 < gap < 1.0 for gap in gaps), gaps


# Prints a line every 20 ms for about 1.5 s: the agent's stream is never quiet for 200 ms.
CHATTY = "import sys, time\nfor i in range(75):\n    print(i, flush=True)\n    time.sleep(0.02)\n"


def test_a_busy_stream_carries_no_heartbeats(
    store: MasterStore, master: MasterServer, launch_agent: Callable[..., AgentProcess]
) -> None:
    """Every message tells the master the agent is alive: a heartbeat is owed only after an
    interval (200 ms here) with nothing else sent."""
    launch_agent(master.address)
    stream = master.double.wait_connected()
    master.double.start("chatty", python_command(CHATTY))
    wait_terminated(store, "chatty")
    kinds = [m.WhichOneof("msg") for m in list(stream.messages)]
    batches = [i for i, m in enumerate(stream.messages) if m.WhichOneof("msg") == "log_batch"]
    assert len(batches) >= 5, kinds
    # Between its first and last batch of lines (about 1.5 s, worth seven heartbeats when they
    # came on a timer) the stream carried the lines, not heartbeats.
    during = kinds[batches[0] : batches[-1]]
    assert during.count("heartbeat") <= 1, during


def test_shutdown_from_the_master_exits_non_zero_with_the_reason(
    master: MasterServer, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address)
    master.double.wait_connected()
    master.double.send(apb.MasterMessage(shutdown=apb.Shutdown(reason="slots changed under a running agent")))
    assert agent.proc.wait(15) == 1
    assert "slots changed under a running agent" in agent.log_text()


def test_a_master_that_refuses_the_agent_makes_it_exit(
    store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    master = MasterServer(
        store, refuse=(grpc.StatusCode.INVALID_ARGUMENT, "hello.resource_pool: no pool 'x'")
    )
    try:
        agent = launch_agent(master.address, wait=False)
        assert agent.proc.wait(15) == 1
        assert master.double.refusals == 1
        assert "hello.resource_pool: no pool 'x'" in agent.log_text()
        assert not agent.ready_file.exists()
    finally:
        master.stop()


def test_reconnect_timeout_gives_up_when_no_master_answers(
    launch_agent: Callable[..., AgentProcess], store: MasterStore
) -> None:
    # A port that nothing listens on: take one from a server, then stop it.
    probe = MasterServer(store)
    address = probe.address
    probe.stop()
    started = time.monotonic()
    agent = launch_agent(address, "--reconnect-timeout", "1.5", wait=False)
    assert agent.proc.wait(20) == 1
    assert time.monotonic() - started >= 1.5
    assert "reconnect-timeout" in agent.log_text()
