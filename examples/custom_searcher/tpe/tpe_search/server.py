"""The gRPC server: SearcherService, health checking (so the master and supervisors can probe it)
and reflection (so grpcurl can call it without the .proto files)."""

from __future__ import annotations

import json
import logging
import os
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cairn.searcher.v1 import searcher_pb2_grpc

from .servicer import SERVICE_NAME, TPESearcherServicer
from .sessions import SessionTable

log = logging.getLogger(__name__)

# Snapshots grow with the trials (a few hundred bytes each): allow large searches.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
SERVER_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # The master's channels ping idle connections; let them.
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    # A restarted searcher must be able to take its port back at once, and never share it.
    ("grpc.so_reuseport", 0),
]


@dataclass
class RunningServer:
    server: grpc.Server
    port: int
    health: health.HealthServicer

    def stop(self, grace: float = 5.0) -> None:
        log.info("stopping grace_seconds=%s", grace)
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()
        log.info("stopped")


def serve(host: str, port: int, max_workers: int = 16) -> RunningServer:
    """Start serving; `port` 0 binds a free port, and the bound one is in the result."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="tpe-rpc"),
        options=SERVER_OPTIONS,
    )
    searcher_pb2_grpc.add_SearcherServiceServicer_to_server(TPESearcherServicer(SessionTable()), server)
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
    return RunningServer(server, bound, health_servicer)


def write_ready_file(path: str | None, grpc_port: int) -> None:
    """Tell a supervisor the searcher is up. Written aside and renamed: a reader never sees half a file."""
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps({"pid": os.getpid(), "grpc_port": grpc_port}))
    partial.replace(target)
