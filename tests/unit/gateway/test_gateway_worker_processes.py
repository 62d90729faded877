"""Several processes on the public port (public_server.py): worker processes started as the master
starts them, on the socket it bound, serve REST through the gRPC port, answer /info themselves,
relay /healthz to the loopback listener, cancel a stream whose client left, and stop when the
master's end of their stdin closes. The master's own process stops serving first, so every answer
here comes from a worker."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from http import HTTPStatus

import pytest
import requests

from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.http_server import MasterHttpServer, Response, StreamingResponse, start_http
from services.master.gateway.master_relay import MasterRelay
from services.master.gateway.public_server import (
    PublicHttpServer,
    WorkerSpec,
    start_public_http,
    start_workers,
)
from tests.unit.gateway.conftest import Observed, start_scripted

INFO = {"version": "0.38.1", "product": "cairn", "cluster_name": "workers"}


def healthz(req: object) -> Response | StreamingResponse | None:
    return Response(HTTPStatus.OK, b'{"status": "ok from the loopback listener"}')


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[PublicHttpServer, MasterHttpServer, Observed]]:
    grpc_server, grpc_port, observed = start_scripted()
    loopback, _ = start_http("127.0.0.1", 0, [healthz])
    relay_port = loopback.server_address[1]
    public = start_public_http("127.0.0.1", 0, HttpLimits(), None, MasterRelay("127.0.0.1", relay_port))
    spec = WorkerSpec(
        fd=public.socket.fileno(),
        grpc_host="127.0.0.1",
        grpc_port=grpc_port,
        relay_host="127.0.0.1",
        relay_port=relay_port,
        info=INFO,
        workers=8,
        max_connections=64,
        queue_timeout_s=1.0,
    )
    start_workers(public, spec, 2)
    public.stop_serving_here()  # the master's own process stops accepting: the workers answer alone
    try:
        yield public, loopback, observed
    finally:
        public.shutdown()
        public.server_close()
        loopback.shutdown()
        loopback.server_close()
        grpc_server.stop(grace=None)


def test_workers_serve_rest_info_and_relayed_routes(
    workers: tuple[PublicHttpServer, MasterHttpServer, Observed],
) -> None:
    public, _, _ = workers
    base = f"http://127.0.0.1:{public.server_address[1]}"
    for _ in range(20):  # fresh connections: whichever worker takes each one answers the same
        master = requests.get(f"{base}/api/v1/master", headers={"Connection": "close"}, timeout=10)
        assert master.status_code == 200 and master.json()["clusterName"] == "scripted"
    assert requests.get(f"{base}/info", timeout=10).json() == INFO
    health = requests.get(f"{base}/healthz", timeout=10)
    assert health.json() == {"status": "ok from the loopback listener"}
    wrong = requests.get(f"{base}/api/v1/trials/3", timeout=10)  # a scripted INVALID_ARGUMENT
    assert wrong.status_code == 400 and wrong.json()["code"] == 3
    lines = requests.get(f"{base}/api/v1/trials/5/logs?limit=3", timeout=10).text.splitlines()
    assert [json.loads(line)["result"]["message"] for line in lines] == ["line 0\n", "line 1\n", "line 2\n"]


def test_a_client_leaving_a_workers_stream_cancels_it(
    workers: tuple[PublicHttpServer, MasterHttpServer, Observed],
) -> None:
    public, _, observed = workers
    observed.cancelled.clear()
    with socket.create_connection(("127.0.0.1", public.server_address[1]), timeout=10) as sock:
        sock.sendall(b"GET /api/v1/trials/5/logs?limit=1&follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        deadline = time.monotonic() + 10
        while b"line 0" not in received and time.monotonic() < deadline:
            received += sock.recv(4096)
        assert b"line 0" in received
    assert observed.cancelled.wait(timeout=10)


def test_workers_stop_when_the_master_closes_their_stdin() -> None:
    public = start_public_http("127.0.0.1", 0, HttpLimits(), None)
    spec = WorkerSpec(
        fd=public.socket.fileno(),
        grpc_host="127.0.0.1",
        grpc_port=1,
        relay_host="127.0.0.1",
        relay_port=1,
        info=INFO,
        workers=1,
        max_connections=8,
        queue_timeout_s=1.0,
    )
    start_workers(public, spec, 1)
    worker = public.workers[0].process
    assert worker.poll() is None
    assert worker.stdin is not None
    worker.stdin.close()  # as when the master dies: the pipe's other end closes
    assert worker.wait(timeout=15) == 0
    public.shutdown()
    public.server_close()
