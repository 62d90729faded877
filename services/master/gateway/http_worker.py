"""A worker process of the master's public HTTP port (public_server.py): the REST gateway through
the master's gRPC port, /info and the WebUI here; the task proxy, /healthz and /metrics here too,
with what only the master knows asked of its internal gateway service (master_link.py). Started by
the master only: its WorkerSpec comes as one JSON line on stdin, it says `ready` on stdout once it
serves, and it stops when stdin closes (the master stopped or died).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from pathlib import Path

from cairn.api.v1 import api_pb2
from services.common.logging import configure_logging, get_logger
from services.common.tls import ServerTls
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.master_link import MasterLink
from services.master.gateway.master_routes import health_routes, info_route
from services.master.gateway.public_server import PublicHttpServer, WorkerSpec
from services.master.gateway.rest_gateway import rest_routes
from services.master.gateway.stream_relay import RelayedStream
from services.master.gateway.task_proxy import TaskProxy
from services.master.gateway.webui import webui_routes

log = get_logger(__name__)
# The spec is a few hundred bytes; anything longer is not from the master.
MAX_SPEC_BYTES = 64 * 1024


def read_spec() -> WorkerSpec:
    line = sys.stdin.buffer.readline(MAX_SPEC_BYTES)
    if not line.endswith(b"\n"):
        raise SystemExit("http worker: expected the master's spec, one JSON line, on stdin")
    return WorkerSpec(**json.loads(line))


def main() -> None:
    spec = read_spec()
    configure_logging("master-http", spec.log_format, spec.log_level)  # type: ignore[arg-type]
    limits = HttpLimits(spec.workers, spec.max_connections, spec.queue_timeout_s)
    tls = ServerTls.load(Path(spec.tls_cert), Path(spec.tls_key)) if spec.tls_cert and spec.tls_key else None
    sock = socket.socket(fileno=spec.fd)
    server = PublicHttpServer(sock, [], limits, tls.ssl_context() if tls is not None else None)
    master = MasterLink(spec.grpc_host, spec.grpc_port, spec.gateway_key)
    server.close_hooks.append(master.close)
    server.routes.append(info_route(spec.info))
    server.routes.extend(health_routes(master))
    server.routes.extend(
        rest_routes(
            server,
            api_pb2.DESCRIPTOR.services_by_name["Cairn"],
            spec.grpc_host,
            spec.grpc_port,
            gateway_key=spec.gateway_key,
        )
    )
    server.routes.extend(webui_routes())
    server.serve_proxy(TaskProxy(master.resolve_proxy, spec.tunnels_per_task))
    if spec.streaming:
        server.serve_stream(RelayedStream(master.open_stream))

    def stop_with_the_master() -> None:
        sys.stdin.buffer.read()  # returns at EOF: the master closed the pipe or is gone
        server.request_exit()

    threading.Thread(target=stop_with_the_master, name="master-watch", daemon=True).start()

    def say_ready() -> None:
        sys.stdout.write("ready\n")
        sys.stdout.flush()

    log.info("http worker serving", pid=os.getpid(), port=server.server_address[1])
    server.serve_forever(say_ready)
    server.server_close()


if __name__ == "__main__":
    main()
