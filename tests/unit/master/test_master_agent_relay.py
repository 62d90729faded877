"""Agents' streams through an agent relay (services/agent_relay/, servicers/agent_relay.py): a real
relay process between agents and a server with the master's interceptors and servicers, over real
sockets. A relayed stream is checked, served, recorded in the audit trail and ended as a direct
one: its credential decides who it may speak as, the master's commands reach it, a revocation ends
it naming why, its hang-up detaches it; Enrol and FetchTaskContext pass through with the agent's
metadata; the relay's own call needs the cluster token; and a relay that loses the master ends
its agents' streams UNAVAILABLE, so they reconnect."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc, relay_pb2_grpc
from cairn.agent.v1 import relay_pb2 as rpb
from cairn.metadata_keys import AGENT_CREDENTIAL_KEY, CLUSTER_TOKEN_KEY
from services.common.interceptors import AuthInterceptor
from services.common.server import ServiceServer, start_server
from services.master.domain.audit.events import AuditRecord
from services.master.domain.identity import agent_credentials
from services.master.domain.identity.auth import AuthService
from services.master.domain.metrics.logs import LogStore
from services.master.domain.scheduling import agent_revocation
from services.master.servicers.agent_auth import agent_authenticator
from services.master.servicers.agent_relay import AgentRelayServicer
from services.master.servicers.agent_stream import AgentStreamServicer
from services.master.servicers.audit_interceptor import AuditInterceptor
from services.master.servicers.auth import PUBLIC_METHODS, master_authenticator
from tests.unit.master.domain.harness import Master

TOKEN = "the-cluster-token"
ROOT = Path(__file__).resolve().parents[3]


def _master_server(master: Master, records: list[AuditRecord]) -> ServiceServer:
    """The master's kind of server with its interceptors (audit outermost, then authentication),
    its agent service and the relays' service."""
    authenticate = master_authenticator(
        AuthService(master.db, 3600),
        TOKEN,
        "gateway-key",
        agent_authenticator(master.db, "credentials", TOKEN),
        grants=master.grant_cache(),
    )
    interceptors = [AuditInterceptor(records.append), AuthInterceptor(authenticate, PUBLIC_METHODS)]
    streams = AgentStreamServicer(master.ctx, LogStore(master.ctx), max_agents=8)

    def register(server: Any) -> list[str]:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(streams, server)
        relay_pb2_grpc.add_AgentRelayServicer_to_server(AgentRelayServicer(streams, interceptors), server)
        return []

    return start_server(
        "master",
        register,
        host="127.0.0.1",
        port=0,
        interceptors=interceptors,
        max_workers=16,
        asyncio_server=True,
    )


@contextlib.contextmanager
def _relay(master_port: int, tmp_path: Path) -> Iterator[grpc.Channel]:
    """A relay process in front of the master; a channel to it, as an agent would dial it."""
    ready = tmp_path / "relay.ready"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "services.agent_relay",
            "--master",
            f"127.0.0.1:{master_port}",
            "--port",
            "0",
            "--ready-file",
            str(ready),
        ],
        cwd=ROOT,
        env={**os.environ, "CAIRN_CLUSTER_TOKEN": TOKEN},
    )
    channel: grpc.Channel | None = None
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert process.poll() is None, "the relay exited before it served"
            assert time.monotonic() < deadline, "the relay did not start"
            time.sleep(0.05)
        channel = grpc.insecure_channel(f"127.0.0.1:{json.loads(ready.read_text())['grpc_port']}")
        yield channel
    finally:
        if channel is not None:
            channel.close()
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Relayed:
    channel: grpc.Channel  # to the relay, as agents dial it
    server: ServiceServer  # the master's
    records: list[AuditRecord]  # the master's audit trail
    stopped: bool = False

    def stop_master(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.server.stop(grace=0.5)


@pytest.fixture
def relayed(master: Master, tmp_path: Path) -> Iterator[Relayed]:
    records: list[AuditRecord] = []
    server = _master_server(master, records)
    running = Relayed(cast(grpc.Channel, None), server, records)
    try:
        with _relay(server.port, tmp_path) as channel:
            running.channel = channel
            yield running
    finally:
        running.stop_master()


class _Stream:
    """One Connect call through the relay: a hello, then whatever the test puts."""

    def __init__(self, channel: grpc.Channel, agent_id: str, metadata: list[tuple[str, str]]) -> None:
        self.outgoing: queue.Queue[apb.AgentMessage | None] = queue.Queue()
        hello = apb.Hello(agent_id=agent_id, resource_pool="default", slots=[apb.Slot(id="0")])
        self.outgoing.put(apb.AgentMessage(hello=hello))
        self.call = agent_pb2_grpc.AgentServiceStub(channel).Connect(
            iter(self.outgoing.get, None), metadata=metadata, timeout=30
        )

    def next(self) -> apb.MasterMessage:
        return next(self.call)

    def close(self) -> None:
        self.outgoing.put(None)
        self.call.cancel()


def _refusal(channel: grpc.Channel, agent_id: str, metadata: list[tuple[str, str]]) -> grpc.RpcError:
    stream = _Stream(channel, agent_id, metadata)
    try:
        with pytest.raises(grpc.RpcError) as refused:
            stream.next()
        return refused.value
    finally:
        stream.close()


def _until(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_relayed_stream_is_checked_served_and_recorded_as_a_direct_one(
    master: Master, relayed: Relayed
) -> None:
    channel, records = relayed.channel, relayed.records
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    token = agent_credentials.create_join_token(master.ctx, master.admin, "", 0).token
    # Enrol passes through the relay (its join token is its credential).
    own = [
        (
            AGENT_CREDENTIAL_KEY,
            stub.Enrol(apb.EnrolRequest(agent_id="a1", join_token=token), timeout=10).credential,
        )
    ]
    stream = _Stream(channel, "a1", own)
    welcome = stream.next()
    assert welcome.HasField("welcome") and welcome.welcome.master_id == master.ctx.master_id
    assert "a1" in master.ctx.hub.last_heard()  # its link (the harness counts "connected" itself)
    # What the master queues for the agent reaches it, in order.
    for seq in (1, 2):
        master.ctx.hub.send("a1", apb.MasterMessage(log_ack=apb.LogAck(acked_seq={"c": seq})))
    assert [stream.next().log_ack.acked_seq["c"] for _ in range(2)] == [1, 2]
    # The agent hangs up: the master lets its stream go, as a direct one's.
    stream.close()
    _until(lambda: "a1" not in master.ctx.hub.last_heard(), "the master still holds a1's stream")

    refused = _refusal(channel, "a2", own)
    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "issued to agent a1; it may not speak as a2" in (refused.details() or "")
    refused = _refusal(channel, "a1", [(AGENT_CREDENTIAL_KEY, "made-up")])
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "not one this master issued" in (refused.details() or "")
    refused = _refusal(channel, "a1", [(CLUSTER_TOKEN_KEY, TOKEN)])
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED  # the cluster token is no agent's

    # Each opening recorded as a direct Connect's is, from the agent's address (the relay's peer).
    _until(lambda: len([r for r in records if r.method.endswith("Connect")]) >= 4, "Connect records")
    connects = [r for r in records if r.method.endswith("Connect")]
    assert [r.outcome for r in connects] == ["OK", "PERMISSION_DENIED", "UNAUTHENTICATED", "UNAUTHENTICATED"]
    assert all(r.address == "127.0.0.1" and r.transport == "grpc" for r in connects)
    assert "issued to agent a1" in connects[1].error


def test_a_revocation_ends_a_relayed_stream_naming_it(master: Master, relayed: Relayed) -> None:
    channel = relayed.channel
    token = agent_credentials.create_join_token(master.ctx, master.admin, "a1", 0).token
    credential = [
        (AGENT_CREDENTIAL_KEY, agent_credentials.enrol(master.ctx, "a1", join_token=token).credential)
    ]
    stream = _Stream(channel, "a1", credential)
    assert stream.next().HasField("welcome")
    agent_revocation.revoke(master.ctx, master.admin, "a1")
    with pytest.raises(grpc.RpcError) as ended:
        stream.next()
    assert ended.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "agent a1 was revoked by admin" in (ended.value.details() or "")


def test_a_relays_call_needs_the_cluster_token(master: Master, relayed: Relayed) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{relayed.server.port}") as direct:
        relay = relay_pb2_grpc.AgentRelayStub(direct)
        for metadata in ([], [(CLUSTER_TOKEN_KEY, "wrong")], [(AGENT_CREDENTIAL_KEY, "an-agents")]):
            with pytest.raises(grpc.RpcError) as refused:
                next(relay.Relay(iter([rpb.RelayUp()]), metadata=metadata, timeout=10))
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "must present the cluster token" in (refused.value.details() or "")


def test_a_relay_that_loses_the_master_ends_its_agents_streams_unavailable(
    master: Master, relayed: Relayed
) -> None:
    channel = relayed.channel
    token = agent_credentials.create_join_token(master.ctx, master.admin, "a1", 0).token
    credential = [
        (AGENT_CREDENTIAL_KEY, agent_credentials.enrol(master.ctx, "a1", join_token=token).credential)
    ]
    stream = _Stream(channel, "a1", credential)
    assert stream.next().HasField("welcome")
    relayed.stop_master()
    with pytest.raises(grpc.RpcError) as ended:
        stream.next()
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "the relay lost the master" in (ended.value.details() or "")
    # Until it has a master again, a new stream is refused at once, UNAVAILABLE too (agents retry).
    assert _refusal(channel, "a1", credential).code() == grpc.StatusCode.UNAVAILABLE
