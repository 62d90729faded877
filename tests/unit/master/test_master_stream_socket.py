"""Determined's `/stream` websocket on the real public port (uvicorn, the `websockets` client on the
other side), as the master's own process serves it and as a worker process relays it to the
master's internal gateway service (stream_relay.py): only with the `streaming_updates` switch on
(else 404, as an unknown path), only for a user's session (401 without), a startup message
answered with a sync, then changes as they commit; a bad startup message closes the connection
naming its field (1008), an oversized one closes it as too big (1009), and a dropped subscriber
(the master stops, a client that fell behind) is closed."""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from services.common.interceptors import AuthInterceptor
from services.common.principal import Principal
from services.master.domain.identity.auth import AuthService
from services.master.domain.kernel.errors import Unauthenticated
from services.master.domain.streams.changes import StreamChanges
from services.master.domain.streams.publisher import Publisher
from services.master.domain.workspaces import workspaces
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.internal_service import GatewayServicer, register_gateway_service
from services.master.gateway.master_routes import ContextHealth
from services.master.gateway.proxy_targets import LocalTargets
from services.master.gateway.public_server import (
    PublicHttpServer,
    WorkerSpec,
    start_public_http,
    start_workers,
)
from services.master.gateway.stream_relay import StreamConversations
from services.master.gateway.stream_socket import StreamEndpoint, local_sessions
from services.master.servicers.auth import PUBLIC_METHODS, master_authenticator
from tests.unit.master.domain.harness import Master
from tests.unit.master.proxy_fronts import KINDS

TOKEN = "user-token"


class Front:
    def __init__(self, master: Master, server: PublicHttpServer, publisher: Publisher) -> None:
        self.master = master
        self.server = server
        self.publisher = publisher
        self.url = f"ws://127.0.0.1:{server.server_address[1]}/stream"

    def connect(self, token: str | None = TOKEN) -> ClientConnection:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return ws_connect(self.url, additional_headers=headers, open_timeout=10, max_size=None)

    def project(self, workspace_id: int, name: str) -> int:
        with self.master.ctx.unit_of_work() as w:
            return workspaces.create_project(w, self.master.admin, workspace_id, name, None, None)


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    m = Master(tmp_path / "master")
    try:
        yield m
    finally:
        m.close()


@contextlib.contextmanager
def _internal_service(master: Master, streams: StreamConversations | None, key: str) -> Iterator[int]:
    """The master's internal gateway service on a free port, behind the master's authenticator."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=16),
        interceptors=[
            AuthInterceptor(
                master_authenticator(AuthService(master.db, 3600), None, key, grants=master.grant_cache()),
                PUBLIC_METHODS,
            )
        ],
    )
    targets = LocalTargets(master.ctx, lambda token: Principal())
    register_gateway_service(server, GatewayServicer(targets, ContextHealth(master.ctx), streams))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(grace=None)


def _serve(master: Master, switch_on: bool, kind: str) -> Iterator[Front]:
    publisher = Publisher()
    changes = StreamChanges(master.db, publisher)
    user = Principal(user_id=2, username="determined")

    def authenticate(token: str) -> Principal:
        if token != TOKEN:
            raise Unauthenticated("invalid credentials: unknown or revoked token")
        return user

    sessions = local_sessions(master.db, publisher, authenticate)
    server = start_public_http("127.0.0.1", 0, HttpLimits(), None)
    if switch_on:
        server.serve_stream(StreamEndpoint(sessions))
    try:
        if kind == "master":
            yield Front(master, server, publisher)
            return
        key = secrets.token_urlsafe(16)
        with _internal_service(master, StreamConversations(sessions) if switch_on else None, key) as port:
            spec = WorkerSpec(
                fd=server.socket.fileno(),
                grpc_host="127.0.0.1",
                grpc_port=port,
                gateway_key=key,
                info={},
                workers=8,
                max_connections=64,
                queue_timeout_s=1.0,
                tunnels_per_task=4,
                streaming=switch_on,
            )
            start_workers(server, spec, 1)
            server.stop_serving_here()  # the master's own process stops accepting: the worker answers
            yield Front(master, server, publisher)
    finally:
        server.shutdown()
        server.server_close()
        changes.stop()


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def front(master: Master, kind: str) -> Iterator[Front]:
    yield from _serve(master, switch_on=True, kind=kind)


def _read(ws: ClientConnection) -> dict[str, Any]:
    return json.loads(ws.recv(timeout=10))


def _sync(ws: ClientConnection, sync_id: str) -> list[dict[str, Any]]:
    messages = []
    while (message := _read(ws)) != {"sync_id": sync_id, "complete": True}:
        messages.append(message)
    return messages


def test_the_switch_off_answers_404_as_for_any_unknown_path(master: Master, kind: str) -> None:
    for front in _serve(master, switch_on=False, kind=kind):
        with pytest.raises(InvalidStatus) as refused:
            front.connect()
        assert refused.value.response.status_code == 404


def test_a_session_is_needed_and_another_sites_page_is_refused(front: Front) -> None:
    for token in (None, "stolen"):
        with pytest.raises(InvalidStatus) as refused:
            front.connect(token)
        assert refused.value.response.status_code == 401
        assert b"credentials" in refused.value.response.body
    # A page of another site, with the user's cookie (a browser sends it): refused.
    cookie = {"Cookie": f"auth={TOKEN}"}
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(front.url, additional_headers=cookie, origin="http://evil.example", open_timeout=10)
    assert refused.value.response.status_code == 403
    # The master's own page (the WebUI, same origin, the cookie): served.
    own = f"http://127.0.0.1:{front.server.server_address[1]}"
    with ws_connect(front.url, additional_headers=cookie, origin=own, open_timeout=10) as ws:
        ws.send(json.dumps({"sync_id": "1", "subscribe": {}}))
        assert _read(ws) == {"sync_id": "1", "complete": False}


def test_a_subscription_is_synced_then_sent_each_change(front: Front) -> None:
    with front.master.ctx.unit_of_work() as w:
        vision = workspaces.create_workspace(
            front.master.ctx, w, front.master.admin, "vision", workspaces.WorkspaceSettings()
        )
        audio = workspaces.create_workspace(
            front.master.ctx, w, front.master.admin, "audio", workspaces.WorkspaceSettings()
        )
    first = front.project(vision, "first")
    with front.connect() as ws:
        # As the WebUI sends it: empty lists for the filters it does not use, and a `since`.
        ws.send(
            json.dumps(
                {
                    "sync_id": "1",
                    "known": {"projects": "999"},
                    "subscribe": {"projects": {"workspace_ids": [vision], "project_ids": [], "since": 0}},
                }
            )
        )
        assert _read(ws) == {"sync_id": "1", "complete": False}
        synced = _sync(ws, "1")
        assert synced[0] == {"projects_deleted": "999"}
        assert [m["project"]["id"] for m in synced[1:]] == [first]
        second = front.project(vision, "second")
        front.project(audio, "elsewhere")
        assert _read(ws)["project"]["id"] == second
        # Another startup message replaces the subscription: a new sync, then its changes.
        ws.send(
            json.dumps(
                {
                    "sync_id": "2",
                    "known": {"projects": f"{first},{second}"},
                    "subscribe": {"projects": {"workspace_ids": [audio]}},
                }
            )
        )
        assert _read(ws) == {"sync_id": "2", "complete": False}
        again = _sync(ws, "2")
        assert again[0] == {
            "projects_deleted": f"{first}-{second}" if second == first + 1 else f"{first},{second}"
        }
        assert [m["project"]["name"] for m in again[1:]] == ["elsewhere"]


def test_bad_messages_close_the_connection_naming_why(front: Front) -> None:
    with front.connect() as ws:
        ws.send(json.dumps({"sync_id": "1", "subscribe": {"projects": {"workspace_ids": [-4]}}}))
        with pytest.raises(ConnectionClosed) as closed:
            _read(ws)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert "subscribe.projects.workspace_ids" in closed.value.rcvd.reason
    with front.connect() as ws:
        ws.send("x" * (1024 * 1024 + 1))
        with pytest.raises(ConnectionClosed) as closed:
            _read(ws)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


def test_a_dropped_subscriber_is_closed(front: Front) -> None:
    with front.connect() as ws:
        ws.send(json.dumps({"sync_id": "1", "subscribe": {"projects": {"project_ids": [1]}}}))
        _sync(ws, "1")
        assert front.publisher.count() == 1
        front.publisher.close_all()  # as the master stops
        with pytest.raises(ConnectionClosed) as closed:
            _read(ws)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert "the master is stopping" in closed.value.rcvd.reason
    # The connection's subscriber is gone with it.
    for _ in range(100):
        if front.publisher.count() == 0:
            break
        time.sleep(0.05)
    assert front.publisher.count() == 0
