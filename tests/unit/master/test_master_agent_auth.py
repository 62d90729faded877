"""Who may speak on the master's agent service (servicers/agent_auth.py, agent_stream.py), over a
real gRPC server with the master's interceptor and servicer: an enrolled agent speaks only as its
own id and downloads only its own allocations' model definitions; in the default mode the cluster
token opens nothing there, in compatibility mode it speaks for ids without a credential; a
revocation ends a live stream with PERMISSION_DENIED naming it; the cluster token opens
CreateAgentJoinToken and no other public call."""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc
from cairn.metadata_keys import AGENT_CREDENTIAL_KEY, CLUSTER_TOKEN_KEY
from services.common.interceptors import AuthError, AuthInterceptor
from services.common.server import start_server
from services.master.domain.identity import agent_credentials
from services.master.domain.identity.auth import AuthService
from services.master.domain.metrics.logs import LogStore
from services.master.domain.scheduling import agent_revocation
from services.master.servicers.agent_auth import agent_authenticator
from services.master.servicers.agent_stream import AgentStreamServicer
from services.master.servicers.auth import PUBLIC_METHODS, master_authenticator
from tests.unit.master.domain.harness import Master

TOKEN = "the-cluster-token"


@contextlib.contextmanager
def _agent_service(master: Master, mode: str) -> Iterator[grpc.Channel]:
    authenticate = master_authenticator(
        AuthService(master.db, 3600),
        TOKEN,
        "gateway-key",
        agent_authenticator(master.db, mode, TOKEN),
        grants=master.grant_cache(),
    )

    def register(server: Any) -> list[str]:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(
            AgentStreamServicer(master.ctx, LogStore(master.ctx), max_agents=8), server
        )
        return []

    # The master's own kind of server: its agents' streams are coroutines (services/common/server.py).
    server = start_server(
        "agents",
        register,
        host="127.0.0.1",
        port=0,
        interceptors=[AuthInterceptor(authenticate, PUBLIC_METHODS)],
        max_workers=16,
        asyncio_server=True,
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield channel
    finally:
        channel.close()
        server.stop(grace=0.5)


class _Stream:
    """One Connect call: a hello, then whatever the test puts."""

    def __init__(self, channel: grpc.Channel, agent_id: str, metadata: list[tuple[str, str]]) -> None:
        self.outgoing: queue.Queue[apb.AgentMessage | None] = queue.Queue()
        hello = apb.Hello(agent_id=agent_id, resource_pool="default", slots=[apb.Slot(id="0")])
        self.outgoing.put(apb.AgentMessage(hello=hello))
        self.call = agent_pb2_grpc.AgentServiceStub(channel).Connect(
            iter(self.outgoing.get, None), metadata=metadata, timeout=30
        )

    def first(self) -> apb.MasterMessage:
        return next(self.call)

    def close(self) -> None:
        self.outgoing.put(None)
        self.call.cancel()


def _refusal(channel: grpc.Channel, agent_id: str, metadata: list[tuple[str, str]]) -> grpc.RpcError:
    stream = _Stream(channel, agent_id, metadata)
    try:
        with pytest.raises(grpc.RpcError) as refused:
            stream.first()
        return refused.value
    finally:
        stream.close()


def _enrolled(master: Master, agent_id: str) -> list[tuple[str, str]]:
    token = agent_credentials.create_join_token(master.ctx, master.admin, agent_id, 0).token
    credential = agent_credentials.enrol(master.ctx, agent_id, join_token=token).credential
    return [(AGENT_CREDENTIAL_KEY, credential)]


def test_an_enrolled_agent_speaks_only_as_itself(master: Master) -> None:
    with _agent_service(master, "credentials") as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        token = agent_credentials.create_join_token(master.ctx, master.admin, "", 0).token
        # Enrol needs no metadata: the join token is the credential.
        answer = stub.Enrol(apb.EnrolRequest(agent_id="a1", join_token=token), timeout=10)
        own = [(AGENT_CREDENTIAL_KEY, answer.credential)]
        stream = _Stream(channel, "a1", own)
        assert stream.first().HasField("welcome")
        stream.close()

        refused = _refusal(channel, "a2", own)
        assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "issued to agent a1; it may not speak as a2" in (refused.details() or "")
        refused = _refusal(channel, "a1", [(CLUSTER_TOKEN_KEY, TOKEN)])
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "admits agents by credentials of their own" in (refused.details() or "")
        refused = _refusal(channel, "a1", [(AGENT_CREDENTIAL_KEY, "made-up")])
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "not one this master issued" in (refused.details() or "")

        with pytest.raises(grpc.RpcError) as denied:
            stub.Enrol(apb.EnrolRequest(agent_id="a3", join_token=token), timeout=10)
        assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "was used already, by agent a1" in (denied.value.details() or "")


def test_an_agent_downloads_only_its_own_allocations_context(master: Master) -> None:
    master.add_agent("a1")
    (trial,) = master.trials(master.create())
    allocation_id = master.live(trial.id).id
    with _agent_service(master, "credentials") as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        own = b"".join(
            c.data
            for c in stub.FetchTaskContext(
                apb.FetchTaskContextRequest(allocation_id=allocation_id), metadata=_enrolled(master, "a1")
            )
        )
        assert own  # the model definition
        with pytest.raises(grpc.RpcError) as other:
            list(
                stub.FetchTaskContext(
                    apb.FetchTaskContextRequest(allocation_id=allocation_id), metadata=_enrolled(master, "a2")
                )
            )
        assert other.value.code() == grpc.StatusCode.NOT_FOUND


def test_compatibility_mode_takes_the_cluster_token_for_ids_without_a_credential(master: Master) -> None:
    enrolled = _enrolled(master, "a1")
    with _agent_service(master, "cluster_token") as channel:
        stream = _Stream(channel, "old-style", [(CLUSTER_TOKEN_KEY, TOKEN)])
        assert stream.first().HasField("welcome")
        stream.close()
        stream = _Stream(channel, "a1", enrolled)  # its own credential works as ever
        assert stream.first().HasField("welcome")
        stream.close()
        refused = _refusal(channel, "a1", [(CLUSTER_TOKEN_KEY, TOKEN)])
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "agent a1 has a credential of its own" in (refused.details() or "")
        refused = _refusal(channel, "old-style", [(CLUSTER_TOKEN_KEY, "wrong")])
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_revocation_ends_the_live_stream_naming_it(master: Master) -> None:
    credential = _enrolled(master, "a1")
    with _agent_service(master, "credentials") as channel:
        stream = _Stream(channel, "a1", credential)
        assert stream.first().HasField("welcome")
        agent_revocation.revoke(master.ctx, master.admin, "a1")
        with pytest.raises(grpc.RpcError) as ended:
            for _ in stream.call:
                pass
        assert ended.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "agent a1 was revoked by admin" in (ended.value.details() or "")
        refused = _refusal(channel, "a1", credential)
        assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "this master refuses it from now on" in (refused.details() or "")


def test_the_cluster_token_opens_join_tokens_alone_on_the_public_api(master: Master) -> None:
    authenticate = master_authenticator(
        AuthService(master.db, 3600), TOKEN, "gateway-key", grants=master.grant_cache()
    )
    given = [(CLUSTER_TOKEN_KEY, TOKEN)]
    principal = authenticate("/cairn.api.v1.Cairn/CreateAgentJoinToken", given)
    assert principal.internal and principal.user_id is None
    with pytest.raises(AuthError, match="missing credentials"):
        authenticate("/cairn.api.v1.Cairn/RevokeAgent", given)
    with pytest.raises(AuthError, match="missing credentials"):
        authenticate("/cairn.api.v1.Cairn/CreateAgentJoinToken", [(CLUSTER_TOKEN_KEY, "wrong")])
