"""The master's TCP proxy for shells, on a real HTTP server in front of a real TCP service: it
accepts the websocket Determined's tunnel (and Cairn's) opens, carries bytes both ways inside
binary messages, answers pings, closes when the service does, refuses another user's session and
anything but a websocket, and bounds every frame before reading it. The framing itself follows
RFC 6455 (its own example handshake)."""

from __future__ import annotations

import io
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.shell_tunnel import connect, encode_client_frame, read_server_frame
from services.common.principal import Principal
from services.master.domain.allocations import task_services
from services.master.domain.kernel.errors import Unauthenticated
from services.master.domain.kernel.states import TaskKind
from services.master.gateway import tcp_tunnel
from services.master.gateway import websocket_frames as wsf
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.http_server import MasterHttpServer, start_http
from services.master.gateway.master_relay import MasterRelay
from services.master.gateway.public_server import PublicHttpServer, start_public_http
from services.master.gateway.task_proxy import proxy_routes
from services.master.store import models
from tests.unit.master.domain.harness import Master


def test_the_handshake_answer_is_rfc_6455s() -> None:
    assert wsf.accept_value("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    good = {
        "upgrade": "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
    }
    assert wsf.handshake_error(good) is None
    assert "Upgrade" in (wsf.handshake_error({**good, "upgrade": "h2c"}) or "")
    assert "Version" in (wsf.handshake_error({**good, "sec-websocket-version": "8"}) or "")
    assert "Key" in (wsf.handshake_error({**good, "sec-websocket-key": "short"}) or "")


@pytest.mark.parametrize("size", [0, 5, 125, 126, 65_535, 65_536, 300_000])
def test_a_clients_masked_frame_reads_back_whole(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    frame = wsf.read_frame(io.BytesIO(encode_client_frame(0x2, payload, b"\x01\x02\x03\x04")))
    assert frame == wsf.Frame(wsf.Opcode.BINARY, payload)
    assert read_server_frame(io.BytesIO(wsf.encode_frame(wsf.Opcode.BINARY, payload))) == (0x2, payload)


def test_frames_that_break_the_protocol_are_refused_before_their_payload_is_read() -> None:
    unmasked = wsf.encode_frame(wsf.Opcode.BINARY, b"x")
    with pytest.raises(wsf.FrameError, match="masked"):
        wsf.read_frame(io.BytesIO(unmasked))
    huge = struct.pack("!BBQ", 0x82, 0x80 | 127, 1 << 40)  # claims a terabyte, sends nothing
    with pytest.raises(wsf.FrameError, match="over the limit") as refused:
        wsf.read_frame(io.BytesIO(huge))
    assert refused.value.code == wsf.CLOSE_TOO_BIG
    long_ping = encode_client_frame(0x9, b"p" * 200, b"abcd")
    with pytest.raises(wsf.FrameError, match="control frame"):
        wsf.read_frame(io.BytesIO(long_ping))
    assert wsf.read_frame(io.BytesIO(b"\x82")) is None  # the connection ended mid-frame


class EchoService:
    """A task's TCP port: echoes every byte; b"bye" makes it close its end."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                if data == b"bye":
                    return
                conn.sendall(data)


# Through the loopback listener itself, and through the public port that relays /proxy/ to it.
@pytest.fixture(params=["loopback", "public"])
def proxied_shell(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[MasterHttpServer | PublicHttpServer, str, dict[str, Principal]]]:
    master = Master(tmp_path / "master")
    owner = Principal(user_id=master.admin.user_id, username="admin", admin=False)
    sessions: dict[str, Principal] = {
        "owner-token": owner,
        "other-token": Principal(user_id=9999, username="x"),
    }

    def authenticate(token: str) -> Principal:
        if token not in sessions:
            raise Unauthenticated("invalid credentials: unknown or revoked token")
        return sessions[token]

    master.add_agent("a1")
    task_id = master.launch(TaskKind.SHELL)
    with master.db.read() as s:
        alloc_id = s.query(models.Allocation).filter_by(task_id=task_id).one().id
    master.run_containers(alloc_id)
    task_services.report_ready(master.ctx, Principal(allocation_id=alloc_id), alloc_id)
    service = EchoService()
    with master.ctx.unit_of_work() as w:
        w.session.get_one(models.Allocation, alloc_id).proxy_address = f"127.0.0.1:{service.port}"
    server, _ = start_http("127.0.0.1", 0, proxy_routes(master.ctx, authenticate))
    relay = MasterRelay("127.0.0.1", server.server_address[1])
    front = (
        start_public_http("127.0.0.1", 0, HttpLimits(), None, relay) if request.param == "public" else None
    )
    try:
        yield front or server, task_id, sessions
    finally:
        if front is not None:
            front.shutdown()
            front.server_close()
        server.shutdown()
        server.server_close()
        service.listener.close()
        master.close()


def test_bytes_cross_the_tunnel_both_ways_until_the_service_closes(proxied_shell) -> None:  # type: ignore[no-untyped-def]
    server, task_id, _ = proxied_shell
    sock = connect("127.0.0.1", server.server_address[1], task_id, None, tls=False)  # no session
    reader = sock.makefile("rb")
    with sock:
        for message in (b"SSH-2.0-test\r\n", b"x" * 200_000):
            sock.sendall(encode_client_frame(0x2, message, b"abcd"))
            echoed = b""
            while len(echoed) < len(message):
                frame = read_server_frame(reader)
                assert frame is not None and frame[0] == 0x2
                echoed += frame[1]
            assert echoed == message
        sock.sendall(encode_client_frame(0x9, b"are you there", b"abcd"))
        assert read_server_frame(reader) == (0xA, b"are you there")
        sock.sendall(encode_client_frame(0x2, b"bye", b"abcd"))
        closing = read_server_frame(reader)
        assert closing is not None and closing[0] == 0x8  # the service's end closed the tunnel


def test_the_tunnel_is_refused_to_another_users_session_and_to_plain_http(proxied_shell) -> None:  # type: ignore[no-untyped-def]
    server, task_id, _ = proxied_shell
    port = server.server_address[1]
    with pytest.raises(Exception, match="403"):
        connect("127.0.0.1", port, task_id, "other-token", tls=False)
    connect("127.0.0.1", port, task_id, "owner-token", tls=False).close()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
        plain.sendall(f"GET /proxy/{task_id}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert plain.recv(4096).startswith(b"HTTP/1.1 400")


def test_a_shells_open_tunnels_are_bounded(proxied_shell, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    server, task_id, _ = proxied_shell
    port = server.server_address[1]
    monkeypatch.setattr(tcp_tunnel.OPEN_TUNNELS, "limit", 1)
    first = connect("127.0.0.1", port, task_id, None, tls=False)
    with first, pytest.raises(Exception, match="429"):
        connect("127.0.0.1", port, task_id, None, tls=False)
    # Once the first one has closed, its place is free again.
    deadline = time.monotonic() + 10
    while True:
        try:
            connect("127.0.0.1", port, task_id, None, tls=False).close()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
