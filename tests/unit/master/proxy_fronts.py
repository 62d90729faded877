"""The public port in front of the task proxy, as each kind of process serves it: the master's own
process (targets resolved in place), or a worker process (a real `http_worker` process, the master's
own process no longer accepting) that asks a real gRPC server for its targets: the master's
internal gateway service behind the master's own authenticator, which wants the per-boot key."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from concurrent import futures

import grpc

from services.common.interceptors import AuthInterceptor
from services.master.domain.identity.auth import AuthService
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.internal_service import GatewayServicer, register_gateway_service
from services.master.gateway.master_routes import ContextHealth, health_routes
from services.master.gateway.proxy_targets import LocalTargets
from services.master.gateway.public_server import (
    PublicHttpServer,
    WorkerSpec,
    start_public_http,
    start_workers,
)
from services.master.gateway.task_proxy import TaskProxy
from services.master.servicers.auth import PUBLIC_METHODS, master_authenticator
from tests.unit.master.domain.harness import Master

KINDS = ["master", "worker"]


@contextlib.contextmanager
def gateway_service(master: Master, targets: LocalTargets, key: str) -> Iterator[int]:
    """The master's internal gateway service on a free port, as the master serves it."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8),
        interceptors=[
            AuthInterceptor(
                master_authenticator(AuthService(master.db, 3600), None, key, grants=master.grant_cache()),
                PUBLIC_METHODS,
            )
        ],
    )
    register_gateway_service(server, GatewayServicer(targets, ContextHealth(master.ctx)))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(grace=None)


@contextlib.contextmanager
def proxy_front(
    kind: str, master: Master, targets: LocalTargets, tunnels_per_task: int = 32
) -> Iterator[PublicHttpServer]:
    front = start_public_http("127.0.0.1", 0, HttpLimits(), None)
    front.routes.extend(health_routes(ContextHealth(master.ctx)))
    front.serve_proxy(TaskProxy(targets, tunnels_per_task))
    try:
        if kind == "master":
            yield front
            return
        key = secrets.token_urlsafe(16)
        with gateway_service(master, targets, key) as grpc_port:
            spec = WorkerSpec(
                fd=front.socket.fileno(),
                grpc_host="127.0.0.1",
                grpc_port=grpc_port,
                gateway_key=key,
                info={},
                workers=8,
                max_connections=64,
                queue_timeout_s=1.0,
                tunnels_per_task=tunnels_per_task,
            )
            start_workers(front, spec, 1)
            front.stop_serving_here()  # the master's own process stops accepting: the worker answers
            yield front
    finally:
        front.shutdown()
        front.server_close()
