"""The master's task proxy, on a real HTTP server in front of a real service: it answers only
with a session, only for the task's owner or an admin, and only while the task runs; it relays
HTTP answers as the service gives them (status, repeated headers, streamed bodies) without the
user's credentials, and tunnels upgraded connections (websockets) byte for byte."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from services.common.principal import Principal
from services.master.domain.allocations import task_services
from services.master.domain.kernel.errors import Unauthenticated
from services.master.domain.kernel.states import TaskKind
from services.master.domain.tasks import tasks
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.http_server import MasterHttpServer, start_http
from services.master.gateway.master_relay import MasterRelay
from services.master.gateway.public_server import PublicHttpServer, start_public_http
from services.master.gateway.task_proxy import proxy_routes, split_proxy_path
from services.master.store import models
from tests.unit.master.domain.harness import Master


class Service(BaseHTTPRequestHandler):
    """A task's service: says what it was sent; upgrades to an echo of every byte."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.headers.get("Upgrade") == "echo":
            self.send_response(101)
            self.send_header("Upgrade", "echo")
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            while data := self.connection.recv(1024):
                self.connection.sendall(data)
            return
        body = repr(
            (
                self.path,
                self.headers.get("Authorization"),
                self.headers.get("Cookie"),
                self.headers.get("Host"),
            )
        ).encode()
        self.send_response(200)
        self.send_header("Set-Cookie", "a=1")
        self.send_header("Set-Cookie", "b=2")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(201)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for part in (body, b"-done"):
            self.wfile.write(b"%X\r\n%s\r\n" % (len(part), part))
        self.wfile.write(b"0\r\n\r\n")


# Through the loopback listener itself, and through the public port that relays /proxy/ to it.
@pytest.fixture(params=["loopback", "public"])
def cluster(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Master, MasterHttpServer | PublicHttpServer, dict[str, Principal]]]:
    master = Master(tmp_path / "master")
    sessions: dict[str, Principal] = {"admin-token": master.admin}

    def authenticate(token: str) -> Principal:
        if token not in sessions:
            raise Unauthenticated("invalid credentials: unknown or revoked token")
        return sessions[token]

    server, _ = start_http("127.0.0.1", 0, proxy_routes(master.ctx, authenticate))
    relay = MasterRelay("127.0.0.1", server.server_address[1])
    front = (
        start_public_http("127.0.0.1", 0, HttpLimits(), None, relay) if request.param == "public" else None
    )
    try:
        yield master, front or server, sessions
    finally:
        if front is not None:
            front.shutdown()
            front.server_close()
        server.shutdown()
        server.server_close()
        master.close()


def serving_notebook(master: Master) -> tuple[str, ThreadingHTTPServer]:
    """A notebook whose allocation reported ready, with a service on its recorded port."""
    master.add_agent("a1")
    task_id = master.launch(TaskKind.NOTEBOOK)
    with master.db.read() as s:
        alloc = s.query(models.Allocation).filter_by(task_id=task_id).one()
        alloc_id = alloc.id
    master.run_containers(alloc_id)
    task_services.report_ready(master.ctx, Principal(allocation_id=alloc_id), alloc_id)
    service = ThreadingHTTPServer(("127.0.0.1", 0), Service)
    service.daemon_threads = True
    threading.Thread(target=service.serve_forever, daemon=True).start()
    with master.ctx.unit_of_work() as w:  # the service's real port, as the task would listen on it
        found = w.session.get_one(models.Allocation, alloc_id)
        found.proxy_address = f"127.0.0.1:{service.server_address[1]}"
    return task_id, service


def request(
    server: MasterHttpServer | PublicHttpServer,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None = None,
) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    conn.request(method, path, body=body, headers=headers)
    return conn.getresponse()


def test_proxy_paths_name_their_task() -> None:
    assert split_proxy_path("/proxy/abc/lab?x=1") == ("abc", "/proxy/abc/lab?x=1")
    assert split_proxy_path("/proxy/abc") == ("abc", "/proxy/abc")
    assert split_proxy_path("/proxy/") is None
    assert split_proxy_path("/api/v1/tasks") is None


def test_the_proxy_relays_for_the_owner_without_their_credentials(cluster) -> None:  # type: ignore[no-untyped-def]
    master, server, _ = cluster
    task_id, service = serving_notebook(master)
    with master.db.read() as s:
        token_hash = s.query(models.Allocation).filter_by(task_id=task_id).one().token_hash
    try:
        path = f"/proxy/{task_id}/api/status?x=1"
        answer = request(
            server, "GET", path, {"Authorization": "Bearer admin-token", "Cookie": "auth=t; k=v"}
        )
        body = answer.read().decode()
        assert answer.status == 200
        assert answer.headers.get_all("Set-Cookie") == ["a=1", "b=2"]
        sent_path, authorization, cookie, host = eval(body)
        # The user's session never reaches the task; the notebook gets only its own credential.
        assert (sent_path, authorization, cookie) == (path, f"token {token_hash}", "k=v")
        assert host == f"127.0.0.1:{server.server_address[1]}"  # the browser's Host, for Jupyter's checks
        # The WebUI's cookie is a session too; a streamed (chunked) answer streams through.
        posted = request(
            server, "POST", f"/proxy/{task_id}/api/kernels", {"Cookie": "auth=admin-token"}, b"hello"
        )
        assert (posted.status, posted.read()) == (201, b"hello-done")
    finally:
        service.shutdown()
        service.server_close()


def test_the_proxy_refuses_without_a_session_or_for_another_user(cluster) -> None:  # type: ignore[no-untyped-def]
    master, server, sessions = cluster
    task_id, service = serving_notebook(master)
    try:
        sessions["other-token"] = Principal(user_id=9999, username="other")
        anonymous = request(server, "GET", f"/proxy/{task_id}/lab", {})
        assert anonymous.status == 401 and b"authentication required" in anonymous.read()
        bad = request(server, "GET", f"/proxy/{task_id}/lab", {"Authorization": "Bearer nope"})
        assert bad.status == 401 and b"unknown or revoked" in bad.read()
        other = request(server, "GET", f"/proxy/{task_id}/lab", {"Authorization": "Bearer other-token"})
        assert other.status == 403 and b"another user" in other.read()
        missing = request(server, "GET", "/proxy/nope/lab", {"Authorization": "Bearer admin-token"})
        assert missing.status == 404
    finally:
        service.shutdown()
        service.server_close()


def test_the_proxy_tunnels_an_upgraded_connection(cluster) -> None:  # type: ignore[no-untyped-def]
    master, server, _ = cluster
    task_id, service = serving_notebook(master)
    try:
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as sock:
            sock.sendall(
                f"GET /proxy/{task_id}/api/kernels/k/channels HTTP/1.1\r\nHost: x\r\n"
                "Authorization: Bearer admin-token\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n".encode()
            )
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(1024)
            if isinstance(server, PublicHttpServer):
                # ASGI upgrades to websockets only (the tasks' services, Jupyter's kernels and the
                # shell tunnel, speak nothing else): another upgrade is an ordinary request there.
                assert head.startswith(b"HTTP/1.1 200")
                return
            assert head.startswith(b"HTTP/1.1 101")
            for message in (b"ping", b"x" * 200_000):
                sock.sendall(message)
                echoed = b""
                while len(echoed) < len(message):
                    echoed += sock.recv(65536)
                assert echoed == message
    finally:
        service.shutdown()
        service.server_close()


def test_the_proxy_refuses_a_task_that_has_ended(cluster) -> None:  # type: ignore[no-untyped-def]
    master, server, _ = cluster
    task_id, service = serving_notebook(master)
    try:
        with master.ctx.unit_of_work() as w:
            tasks.kill(master.ctx, w, tasks.load(w, task_id))
        master.settle()
        (container,) = [c for _, c in master.hub.commands("kill")]
        master.exit(container.container_id, 143)
        ended = request(server, "GET", f"/proxy/{task_id}/lab", {"Authorization": "Bearer admin-token"})
        assert ended.status == 404 and b"has ended" in ended.read()
    finally:
        service.shutdown()
        service.server_close()
