"""The master's public HTTP port: one ASGI app (asgi_app.py) under uvicorn, in the master's process
and in `processes - 1` worker processes (http_worker.py) that accept on the same listening socket.

Why this shape:
  * One HTTP stack: everything the port answers, the task proxy's exchanges, websockets and shell
    tunnels included, is answered by the ASGI app in the process that accepted the connection, on
    maintained libraries (uvicorn's HTTP and websocket protocols towards the caller; httpx, the
    `websockets` client and asyncio streams towards a task). No second server, no relay between
    servers, no protocol code of our own.
  * uvicorn's own multi-process model is one socket bound by the parent and inherited by the
    workers: port 0 works, no other program can bind into the port (as SO_REUSEPORT would let a
    process of the same user do), and the kernel hands each connection to whichever process
    accepts first, so a busy process takes fewer.
  * The master's process serves too: its REST calls skip the loopback gRPC hop (LocalCalls), its
    proxy resolves a task in place, and a single-process master (the default) starts no other
    process at all.
  * Worker processes hold no domain state: they transcode REST to the master's gRPC port with the
    caller's credentials, answer /info and the WebUI themselves, and ask the master's internal
    gRPC service (proto/cairn/gateway/v1/gateway.proto, opened by a per-boot key) what only it
    knows: where the task proxy takes a caller (then they proxy to the task themselves), /healthz
    and /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import uvicorn

from services.common.held_ports import bind_when_free
from services.common.logging import get_logger
from services.master.gateway.asgi_app import GatewayApp
from services.master.gateway.http_answers import PlainRoute
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.stream_relay import RelayedStream
from services.master.gateway.stream_socket import StreamEndpoint
from services.master.gateway.task_proxy import TaskProxy

log = get_logger(__name__)

# A burst of clients connecting at once must not overflow the listen backlog.
BACKLOG = 1024
# Idle keep-alive connections are closed after this (browsers and SDK sessions reconnect at once).
KEEP_ALIVE_S = 75
# How long a stopping server lets ordinary requests finish; streams are cut at once after it.
GRACEFUL_STOP_S = 3
# A worker process that has not started serving by then is a failed start.
WORKER_START_TIMEOUT_S = 30.0
# The largest websocket message either side of the task proxy takes (read whole by uvicorn before
# the app sees it: the bound comes first). Jupyter's outputs stay well under it.
WS_MAX_BYTES = 16 * 1024 * 1024


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        # The master restarted on its port may find it held for a moment (held_ports.py).
        bind_when_free(lambda: sock.bind((host, port)), "master http", host, port)
    except OSError:
        sock.close()
        raise
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def uvicorn_config(app: GatewayApp, limits: HttpLimits, ssl_context: ssl.SSLContext | None) -> uvicorn.Config:
    config = uvicorn.Config(
        app,
        # httptools (llhttp, in C) costs half what h11 does per request; its one gap, chunked answers
        # to HTTP/1.0 clients, is closed in asgi_app (such a client gets a stream whole).
        http="httptools",
        loop="uvloop",
        ws="websockets-sansio",
        ws_max_size=WS_MAX_BYTES,
        ws_per_message_deflate=False,  # the proxy passes messages on as they are
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        backlog=BACKLOG,
        timeout_keep_alive=KEEP_ALIVE_S,
        timeout_graceful_shutdown=GRACEFUL_STOP_S,
        # Connections open at once in this process; one more is answered 503. (uvicorn counts the
        # asking connection among them, hence the one more.)
        limit_concurrency=limits.max_connections + 1,
    )
    config.load()
    config.ssl = ssl_context  # the master's own context (services/common/tls.py), not uvicorn's
    return config


class PublicHttpServer:
    """uvicorn in a thread of this process, serving `sock`. `routes` may be extended until the
    first request comes (the master adds its routes once gRPC is up)."""

    def __init__(
        self,
        sock: socket.socket,
        routes: list[PlainRoute],
        limits: HttpLimits,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`limits` are this process's share (HttpLimits.per_process)."""
        self.socket = sock
        self.server_address = sock.getsockname()
        self.routes = routes
        self.app = GatewayApp(routes, limits)
        self._server = uvicorn.Server(uvicorn_config(self.app, limits, ssl_context))
        self._thread: threading.Thread | None = None
        self.close_hooks: list[Callable[[], None]] = [self.app.close]
        self.workers: list[WorkerProcess] = []

    def serve_stream(self, stream: StreamEndpoint | RelayedStream) -> None:
        """/stream is answered by `stream` from now on (before, and without it, 404)."""
        self.app.stream = stream

    def serve_proxy(self, proxy: TaskProxy) -> None:
        """/proxy/ is answered by `proxy` from now on (before, it is an unknown path: 404)."""
        self.app.proxy = proxy

    def start(self) -> None:
        """Serve in a thread of this process; returns once serving."""
        started = threading.Event()
        self._thread = threading.Thread(
            target=self.serve_forever, args=(started.set,), name="http", daemon=True
        )
        self._thread.start()
        started.wait(WORKER_START_TIMEOUT_S)

    def serve_forever(self, on_started: Callable[[], None] = lambda: None) -> None:
        """Serve in this thread until request_exit(); `on_started` is called once serving."""
        import uvloop  # the event loop uvicorn is fastest on; imported where it runs

        async def run() -> None:
            serving = asyncio.ensure_future(self._server.serve(sockets=[self.socket]))
            while not self._server.started and not serving.done():
                await asyncio.sleep(0.01)
            on_started()
            try:
                await serving
            finally:
                await self.app.aclose()

        try:
            uvloop.run(run())
        finally:
            on_started()  # a server that failed to start must not leave its starter waiting

    def request_exit(self) -> None:
        self._server.should_exit = True

    def stop_serving_here(self) -> None:
        """This process stops serving (worker processes serve on)."""
        self.request_exit()
        if self._thread is not None:
            self._thread.join(GRACEFUL_STOP_S + 5)

    def shutdown(self) -> None:
        for worker in self.workers:
            worker.ask_to_stop()  # all at once: each may take its graceful stop time
        for worker in self.workers:
            worker.stop()
        self.stop_serving_here()

    def server_close(self) -> None:
        for hook in self.close_hooks:
            with contextlib.suppress(Exception):
                hook()
        self.socket.close()


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process needs, sent as JSON on its stdin. One secret: `gateway_key`, the
    per-boot key that opens the master's internal gateway service (and nothing else), which only
    this private pipe carries (never the environment, argv or a file). Callers bring their own
    credentials, and the TLS key is read from the file the master was given."""

    fd: int
    grpc_host: str
    grpc_port: int
    gateway_key: str
    info: dict[str, Any]
    workers: int  # this process's share of the limits (HttpLimits.per_process)
    max_connections: int
    queue_timeout_s: float
    tunnels_per_task: int  # this process's share of the proxy's tunnels per task
    # The `streaming_updates` switch is on: /stream is relayed to the master (stream_relay.py).
    streaming: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    log_format: str = "console"
    log_level: str = "INFO"


# What a worker does not need and must not hold: it serves callers with their own credentials.
_WITHHELD_FROM_WORKERS = (
    "CAIRN_CLUSTER_TOKEN",
    "CAIRN_INITIAL_USER_PASSWORD",
    "CAIRN_AGENT_ENROLMENT_SECRET",
)


def _worker_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _WITHHELD_FROM_WORKERS}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class WorkerProcess:
    """One `python -m services.master.gateway.http_worker`. It serves until its stdin closes,
    which happens when the master stops, or dies (kill -9 included), so no worker outlives it."""

    def __init__(self, spec: WorkerSpec, index: int) -> None:
        self.index = index
        self.process = subprocess.Popen(
            [sys.executable, "-m", "services.master.gateway.http_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(spec.fd,),
            env=_worker_environment(),
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(asdict(spec)).encode() + b"\n")
        self.process.stdin.flush()

    def wait_ready(self) -> None:
        """Returns once the worker serves; RuntimeError when it exited instead."""
        assert self.process.stdout is not None
        ready = threading.Event()
        line: list[bytes] = []

        def read() -> None:
            assert self.process.stdout is not None
            line.append(self.process.stdout.readline())
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(WORKER_START_TIMEOUT_S) or not line or line[0].strip() != b"ready":
            self.stop()
            raise RuntimeError(f"http worker process {self.index} did not start (exit {self.process.poll()})")

    def ask_to_stop(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()

    def stop(self) -> None:
        self.ask_to_stop()
        try:
            self.process.wait(GRACEFUL_STOP_S + 5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_public_http(
    host: str,
    port: int,
    limits: HttpLimits,
    ssl_context: ssl.SSLContext | None,
) -> PublicHttpServer:
    """The public port, served by this process; routes and the task proxy (serve_proxy) are added
    once the master's domain is up, worker processes by start_workers."""
    sock = listening_socket(host, port)
    server = PublicHttpServer(sock, [], limits, ssl_context)
    server.start()
    log.info("http serving", host=host, port=server.server_address[1], https=ssl_context is not None)
    return server


def start_workers(server: PublicHttpServer, spec: WorkerSpec, count: int) -> None:
    """`count` more processes serving the server's socket; raises when one does not start."""
    workers = [WorkerProcess(spec, index) for index in range(1, count + 1)]
    server.workers.extend(workers)
    for worker in workers:
        worker.wait_ready()
    log.info("http worker processes serving", processes=count + 1, port=server.server_address[1])
