"""A service restarted on its fixed port waits out an outgoing connection that holds it for a
moment (held_ports.py), and fails naming the port when it stays held. Real sockets on loopback."""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.held_ports import PortHeld, bind_when_free, probe_bind
from services.common.server import start_server
from services.master.gateway.public_server import listening_socket


class Connection:
    """A connection from a client to a listener of the test's own; its client end's port is in use
    the way a restarted service meets its port: as a connection's source port, nobody listening."""

    def __init__(self, listener: socket.socket) -> None:
        self.client = socket.socket()
        self.client.connect(listener.getsockname())
        self.accepted, _ = listener.accept()
        self.port: int = self.client.getsockname()[1]

    def close(self) -> None:
        # The server's end first, as a peer ending the call: the client's port is then free at once.
        self.accepted.close()
        self.client.close()


@contextmanager
def port_held_by_a_client() -> Iterator[tuple[int, Connection]]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        connection = Connection(listener)
        try:
            yield connection.port, connection
        finally:
            connection.close()


def release_after(connection: Connection, seconds: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(seconds), connection.close()), daemon=True)
    thread.start()
    return thread


def test_a_grpc_service_binds_its_fixed_port_once_the_connection_holding_it_ends() -> None:
    with port_held_by_a_client() as (port, client):
        # gRPC alone would fail here: the probe sees the port held.
        with pytest.raises(OSError) as held:
            probe_bind("127.0.0.1", port)
        assert held.value.errno == errno.EADDRINUSE
        release_after(client, 0.6)
        started = time.monotonic()
        server = start_server("probe", lambda _server: [], host="127.0.0.1", port=port)
        try:
            assert server.port == port and time.monotonic() - started >= 0.5
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                health = health_pb2_grpc.HealthStub(channel)
                answer = health.Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            server.stop(0)


def test_the_masters_http_port_is_waited_for_too() -> None:
    with port_held_by_a_client() as (port, client):
        release_after(client, 0.5)
        sock = listening_socket("127.0.0.1", port)
        try:
            assert sock.getsockname()[1] == port
        finally:
            sock.close()


def test_a_port_held_for_the_whole_wait_is_named_in_the_failure() -> None:
    with port_held_by_a_client() as (port, _client):
        started = time.monotonic()
        with pytest.raises(PortHeld, match=f"searcher: 127.0.0.1:{port} is still in use after 1 s"):
            bind_when_free(lambda: probe_bind("127.0.0.1", port), "searcher", "127.0.0.1", port, wait_s=0.6)
        assert 0.5 <= time.monotonic() - started < 5


def test_port_zero_and_other_errors_are_not_waited_for() -> None:
    calls = []

    def refuse(code: int) -> None:
        calls.append(code)
        raise OSError(code, "refused")

    for port, code in [(0, errno.EADDRINUSE), (8080, errno.EADDRNOTAVAIL), (8080, errno.EACCES)]:
        calls.clear()
        with pytest.raises(OSError) as raised:
            bind_when_free(lambda code=code: refuse(code), "master", "127.0.0.1", port, wait_s=30)
        assert raised.value.errno == code and calls == [code]
