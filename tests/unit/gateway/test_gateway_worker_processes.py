"""Several processes on the public port (public_server.py): worker processes started as the master
starts them, on the socket it bound, serve REST through the gRPC port, answer /info themselves,
ask the master's internal gateway service (with the key they were handed) for /healthz and
/metrics, answer 503 while it does not answer, cancel a stream whose client left, and stop when the
master's end of their stdin closes. The master's own process stops serving first, so every answer
here comes from a worker. (The task proxy in a worker: tests/unit/master/test_master_task_proxy.py
and test_master_shell_proxy.py.)"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
import requests

from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.public_server import (
    PublicHttpServer,
    WorkerSpec,
    start_public_http,
    start_workers,
)
from tests.unit.gateway.conftest import GATEWAY_KEY, Observed, start_scripted

INFO = {"version": "0.38.1", "product": "cairn", "cluster_name": "workers"}


def worker_spec(public: PublicHttpServer, grpc_port: int, key: str = GATEWAY_KEY) -> WorkerSpec:
    return WorkerSpec(
        fd=public.socket.fileno(),
        grpc_host="127.0.0.1",
        grpc_port=grpc_port,
        gateway_key=key,
        info=INFO,
        workers=8,
        max_connections=64,
        queue_timeout_s=1.0,
        tunnels_per_task=16,
    )


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[PublicHttpServer, Observed]]:
    grpc_server, grpc_port, observed = start_scripted()
    public = start_public_http("127.0.0.1", 0, HttpLimits(), None)
    start_workers(public, worker_spec(public, grpc_port), 2)
    public.stop_serving_here()  # the master's own process stops accepting: the workers answer alone
    try:
        yield public, observed
    finally:
        public.shutdown()
        public.server_close()
        grpc_server.stop(grace=None)


def test_workers_serve_rest_info_health_and_metrics(workers: tuple[PublicHttpServer, Observed]) -> None:
    public, _ = workers
    base = f"http://127.0.0.1:{public.server_address[1]}"
    for _ in range(20):  # fresh connections: whichever worker takes each one answers the same
        master = requests.get(f"{base}/api/v1/master", headers={"Connection": "close"}, timeout=10)
        assert master.status_code == 200 and master.json()["clusterName"] == "scripted"
    assert requests.get(f"{base}/info", timeout=10).json() == INFO
    for _ in range(4):
        health = requests.get(f"{base}/healthz", headers={"Connection": "close"}, timeout=10)
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        metrics = requests.get(f"{base}/metrics", headers={"Connection": "close"}, timeout=10)
        assert metrics.text == "scripted_gauge 1\n"
        assert metrics.headers["Content-Type"] == "text/plain; version=0.0.4"
    wrong = requests.get(f"{base}/api/v1/trials/3", timeout=10)  # a scripted INVALID_ARGUMENT
    assert wrong.status_code == 400 and wrong.json()["code"] == 3
    lines = requests.get(f"{base}/api/v1/trials/5/logs?limit=3", timeout=10).text.splitlines()
    assert [json.loads(line)["result"]["message"] for line in lines] == ["line 0\n", "line 1\n", "line 2\n"]


def test_a_client_leaving_a_workers_stream_cancels_it(workers: tuple[PublicHttpServer, Observed]) -> None:
    public, observed = workers
    observed.cancelled.clear()
    with socket.create_connection(("127.0.0.1", public.server_address[1]), timeout=10) as sock:
        sock.sendall(b"GET /api/v1/trials/5/logs?limit=1&follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        deadline = time.monotonic() + 10
        while b"line 0" not in received and time.monotonic() < deadline:
            received += sock.recv(4096)
        assert b"line 0" in received
    assert observed.cancelled.wait(timeout=10)


def test_a_worker_whose_master_does_not_answer_says_503() -> None:
    grpc_server, grpc_port, _ = start_scripted()
    public = start_public_http("127.0.0.1", 0, HttpLimits(), None)
    try:
        # A key that is not this master's: its gateway service refuses the worker.
        start_workers(public, worker_spec(public, grpc_port, key="not-the-key"), 1)
        public.stop_serving_here()
        base = f"http://127.0.0.1:{public.server_address[1]}"
        health = requests.get(f"{base}/healthz", timeout=10)
        assert health.status_code == 503 and health.headers["Retry-After"] == "1"
        assert "the master did not answer" in health.json()["status"]
        proxied = requests.get(f"{base}/proxy/some-task/", timeout=10)
        assert proxied.status_code == 503 and "the master did not answer" in proxied.json()["error"]
    finally:
        public.shutdown()
        public.server_close()
        grpc_server.stop(grace=None)


def test_workers_stop_when_the_master_closes_their_stdin() -> None:
    public = start_public_http("127.0.0.1", 0, HttpLimits(), None)
    start_workers(public, worker_spec(public, grpc_port=1), 1)
    worker = public.workers[0].process
    assert worker.poll() is None
    assert worker.stdin is not None
    worker.stdin.close()  # as when the master dies: the pipe's other end closes
    assert worker.wait(timeout=15) == 0
    public.shutdown()
    public.server_close()
