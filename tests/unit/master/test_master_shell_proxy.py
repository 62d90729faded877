"""The master's TCP proxy for shells, on the real public port (in the master's process and in a
worker process) in front of a real TCP service: it accepts the websocket Determined's tunnel (and
Cairn's) opens, carries bytes both ways inside binary messages, answers pings, closes when the
service does and the service's side when the client leaves, refuses another user's session and
anything but a websocket, and bounds every message before reading it."""

from __future__ import annotations

import http.client
import json
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
from services.master.domain.identity import roles
from services.master.domain.identity.grants import Grants
from services.master.domain.kernel.errors import Unauthenticated
from services.master.domain.kernel.states import TaskKind
from services.master.gateway.proxy_targets import LocalTargets
from services.master.gateway.public_server import PublicHttpServer
from services.master.store import models
from tests.unit.master.domain.harness import Master
from tests.unit.master.proxy_fronts import KINDS, proxy_front

# Another user, an Editor everywhere: may read the task, not open another's (identity/roles.py).
AN_EDITOR = Grants(roles.EDITOR.permissions, {})


class EchoService:
    """A task's TCP port: echoes every byte; b"bye" makes it close its end."""

    def __init__(self) -> None:
        self.ended = threading.Semaphore(0)  # released as each connection ends
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
        try:
            with conn:
                while data := conn.recv(65536):
                    if data == b"bye":
                        return
                    conn.sendall(data)
        except OSError:
            pass
        finally:
            self.ended.release()


class Shell:
    def __init__(self, front: PublicHttpServer, task_id: str, service: EchoService) -> None:
        self.port = front.server_address[1]
        self.task_id = task_id
        self.service = service


# Tunnels per task in each process; one test fills them.
TUNNELS = 2


@pytest.fixture(params=KINDS)
def proxied_shell(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shell]:
    master = Master(tmp_path / "master")
    owner = Principal(user_id=master.admin.user_id, username="admin", admin=False)
    sessions: dict[str, Principal] = {
        "owner-token": owner,
        "other-token": Principal(user_id=9999, username="x", grants=AN_EDITOR),
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
    try:
        with proxy_front(request.param, master, LocalTargets(master.ctx, authenticate), TUNNELS) as front:
            yield Shell(front, task_id, service)
    finally:
        service.listener.close()
        master.close()


def test_bytes_cross_the_tunnel_both_ways_until_the_service_closes(proxied_shell: Shell) -> None:
    sock = connect("127.0.0.1", proxied_shell.port, proxied_shell.task_id, None, tls=False)  # no session
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
        assert struct.unpack("!H", closing[1][:2]) == (1000,)


def test_a_client_that_leaves_closes_the_services_side(proxied_shell: Shell) -> None:
    sock = connect("127.0.0.1", proxied_shell.port, proxied_shell.task_id, None, tls=False)
    sock.sendall(encode_client_frame(0x2, b"hello", b"abcd"))
    assert read_server_frame(sock.makefile("rb")) == (0x2, b"hello")
    sock.close()  # no close frame: the connection just ends
    assert proxied_shell.service.ended.acquire(timeout=10)


def test_the_tunnel_is_refused_to_another_users_session_and_to_plain_http(proxied_shell: Shell) -> None:
    port, task_id = proxied_shell.port, proxied_shell.task_id
    with pytest.raises(Exception, match="403"):
        connect("127.0.0.1", port, task_id, "other-token", tls=False)
    connect("127.0.0.1", port, task_id, "owner-token", tls=False).close()
    plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    plain.request("GET", f"/proxy/{task_id}/")
    answer = plain.getresponse()
    assert answer.status == 400 and "TCP service" in json.loads(answer.read())["error"]
    plain.close()


def _close_code(sock: socket.socket) -> int | None:
    """The code of the close frame the server sends next (data frames skipped); None if the
    connection ended without one."""
    reader = sock.makefile("rb")
    while (frame := read_server_frame(reader)) is not None:
        if frame[0] == 0x8:
            return int(struct.unpack("!H", frame[1][:2])[0])
    return None


def test_messages_are_bounded_before_they_are_read(proxied_shell: Shell) -> None:
    port, task_id = proxied_shell.port, proxied_shell.task_id
    # A frame that claims a terabyte and sends nothing: refused from its header (1009).
    sock = connect("127.0.0.1", port, task_id, None, tls=False)
    with sock:
        sock.sendall(struct.pack("!BBQ", 0x82, 0x80 | 127, 1 << 40) + b"abcd")
        assert _close_code(sock) == 1009
    # Over the tunnel's own bound (1 MiB), under the server's: closed as too big as well.
    sock = connect("127.0.0.1", port, task_id, None, tls=False)
    with sock:
        sock.sendall(encode_client_frame(0x2, b"x" * (1024 * 1024 + 1), b"abcd"))
        assert _close_code(sock) == 1009
    # Frames that break the protocol: an unmasked one, a control frame over 125 bytes.
    for broken in (b"\x82\x01x", encode_client_frame(0x9, b"p" * 200, b"abcd")):
        sock = connect("127.0.0.1", port, task_id, None, tls=False)
        with sock:
            sock.sendall(broken)
            assert _close_code(sock) == 1002


def test_a_shells_open_tunnels_are_bounded(proxied_shell: Shell) -> None:
    port, task_id = proxied_shell.port, proxied_shell.task_id
    held = [connect("127.0.0.1", port, task_id, None, tls=False) for _ in range(TUNNELS)]
    with pytest.raises(Exception, match="429"):
        connect("127.0.0.1", port, task_id, None, tls=False)
    for sock in held:
        sock.close()
    # Once one has closed, its place is free again.
    deadline = time.monotonic() + 10
    while True:
        try:
            connect("127.0.0.1", port, task_id, None, tls=False).close()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
