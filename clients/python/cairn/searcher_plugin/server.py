"""Serving a search method: the gRPC server with SearcherService, health checking (so the master and
supervisors can probe it) and reflection (so grpcurl can call it without the .proto files), a ready
file for supervisors, and a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cairn.searcher.v1 import searcher_pb2_grpc
from cairn.searcher_plugin.method import SearchFactory
from cairn.searcher_plugin.servicer import SERVICE_NAME, SearcherServicer
from cairn.termination_signals import route_termination_signals
from cairn.wire import MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)

SERVER_OPTIONS: list[tuple[str, Any]] = [
    # Snapshots grow with the trials: allow large searches.
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # The master's channels ping every 20 s, idle or not; let them.
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_ping_strikes", 0),
    # A restarted searcher must be able to take its port back at once, and never share it.
    ("grpc.so_reuseport", 0),
]
DEFAULT_GRACE_S = 5.0
# How often the main thread looks for a stop request. The kernel may hand a signal to one of gRPC's
# threads, and Python runs its handler only when the main thread next executes bytecode: a wait
# without a timeout would go on serving after a SIGTERM.
_STOP_POLL_S = 0.2


@dataclass
class RunningSearcher:
    server: grpc.Server
    port: int
    health: health.HealthServicer

    def stop(self, grace: float = DEFAULT_GRACE_S) -> None:
        """Answer NOT_SERVING to health checks, give in-flight calls `grace` seconds, and stop."""
        log.info("stopping grace_seconds=%s", grace)
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        log.info("stopped")


def start(
    factory: SearchFactory,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    max_workers: int = 16,
) -> RunningSearcher:
    """Start serving the searches `factory` builds and return at once; `port` 0 binds a free port,
    and the bound one is in the result."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="searcher-rpc"),
        interceptors=list(interceptors),
        options=SERVER_OPTIONS,
    )
    searcher_pb2_grpc.add_SearcherServiceServicer_to_server(SearcherServicer(factory), server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for service in ("", SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    reflection.enable_server_reflection([SERVICE_NAME, health_name, reflection.SERVICE_NAME], server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind {host}:{port}")
    server.start()
    log.info("serving host=%s port=%d", host, bound)
    return RunningSearcher(server, bound, health_servicer)


def serve(
    factory: SearchFactory,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ready_file: str | os.PathLike[str] | None = None,
    grace: float = DEFAULT_GRACE_S,
    max_workers: int = 16,
) -> None:
    """Serve until SIGTERM or SIGINT, then stop cleanly (in-flight calls get `grace` seconds) and
    return. Call it from the program's main thread. Once serving, `ready_file` (when given) holds
    `{"pid": ..., "grpc_port": ...}`."""
    # Handlers go in before serving, so a signal right after the ready file is never missed.
    stop_requested = threading.Event()

    def request_stop(sig: signal.Signals) -> None:
        log.info("signal received signal=%s", sig.name)
        stop_requested.set()

    # Run on a thread of its own, not in the handler, which runs inside the main thread's poll of
    # `stop_requested` (cairn.termination_signals says why).
    route_termination_signals(request_stop)
    running = start(factory, host, port, max_workers=max_workers)
    write_ready_file(ready_file, running.port)
    log.info("searcher ready port=%d pid=%d", running.port, os.getpid())
    while not stop_requested.wait(timeout=_STOP_POLL_S):
        pass
    running.stop(grace)


def write_ready_file(path: str | os.PathLike[str] | None, grpc_port: int) -> None:
    """Tell a supervisor the searcher is up. Written aside and renamed: a reader never sees half a
    file."""
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps({"pid": os.getpid(), "grpc_port": grpc_port}))
    partial.replace(target)
