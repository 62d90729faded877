"""What the HTTP serving layer costs by itself, without the database: wrk keeps 25 connections busy
on `/info` (answered by every process of the public port from memory) and on a 50-line NDJSON
stream (handed over chunk by chunk, and read ahead as a stream that ends on its own is), on the
public port (public_server.py) with 1, 2, ... processes. (Until 2026-12 a threaded http.server ran
beside it on loopback; bench/README.md has its figures.)

    .venv/bin/python -m bench.http_server_overhead [--seconds 5] [--processes 1,2] [--clients 25]

The load generator shares the machine with the servers: on a 2-core machine more processes than
cores only contend. Prints one JSON line per server and path.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from collections.abc import Iterator
from http import HTTPStatus

from services.common.logging import configure_logging
from services.master.gateway.http_answers import Response, StreamingResponse
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.http_request import HttpRequest
from services.master.gateway.master_routes import info_route
from services.master.gateway.public_server import (
    PublicHttpServer,
    WorkerSpec,
    start_public_http,
    start_workers,
)

# About the size of the master's real /info answer.
INFO = {"version": "0.38.1", "cairn_version": "0.1.0", "cluster_name": "bench", "product": "cairn"}
STREAM_LINES = 50


def stream(req: HttpRequest) -> Response | StreamingResponse | None:
    """/stream: handed to the client chunk by chunk, as a followed log is; /stream-read-ahead: a
    stream that ends on its own (a trial's metrics), which the public port reads ahead."""
    if not req.path.startswith("/stream"):
        return None
    lines: Iterator[bytes] = iter([b'{"result": {"n": %d}}\n' % i for i in range(STREAM_LINES)])
    return StreamingResponse(HTTPStatus.OK, lines, lambda: None, read_ahead=req.path == "/stream-read-ahead")


_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    """wrk's latency ("850.00us", "2.55ms", "1.62s") in milliseconds."""
    match = re.fullmatch(r"([\d.]+)([a-z]+)", text)
    if match is None:
        raise ValueError(f"unexpected wrk latency {text!r}")
    return round(float(match.group(1)) * _UNIT_MS[match.group(2)], 2)


def wrk(port: int, path: str, clients: int, seconds: int) -> dict[str, float]:
    command = ["wrk", "-t2", f"-c{clients}", f"-d{seconds}s", "--latency", f"http://127.0.0.1:{port}{path}"]
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=seconds + 60).stdout
    latency = {m.group(1): _ms(m.group(2)) for m in re.finditer(r"^\s+(50|90|99)%\s+(\S+)", out, re.M)}
    rps = float(re.search(r"Requests/sec:\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"errors under load:\n{out}")
    return {"p50_ms": latency["50"], "p99_ms": latency["99"], "throughput_rps": round(rps, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=25)
    parser.add_argument("--processes", default="1,2")
    args = parser.parse_args()
    configure_logging("bench", level="WARNING")
    limits = HttpLimits()
    servers: list[tuple[str, PublicHttpServer]] = []
    for processes in (int(p) for p in args.processes.split(",")):
        share = limits.per_process(processes)
        public = start_public_http("127.0.0.1", 0, share, None)
        public.routes.extend([info_route(INFO), stream])
        if processes > 1:
            spec = WorkerSpec(
                fd=public.socket.fileno(),
                grpc_host="127.0.0.1",
                grpc_port=1,  # never dialled: /info is answered before any REST
                gateway_key="unused",
                info=INFO,
                workers=share.workers,
                max_connections=share.max_connections,
                queue_timeout_s=share.queue_timeout_s,
                tunnels_per_task=1,
                log_level="WARNING",
            )
            start_workers(public, spec, processes - 1)
        servers.append((f"public, {processes} process{'es' if processes > 1 else ''}", public))
    try:
        for name, server in servers:
            port = server.server_address[1]
            paths = ["/info"] if server.workers else ["/info", "/stream", "/stream-read-ahead"]
            for path in paths:
                wrk(port, path, args.clients, 2)  # warm-up
                load = round(os.getloadavg()[0], 2)
                result = wrk(port, path, args.clients, args.seconds)
                print(json.dumps({"server": name, "path": path, "load_1m": load, **result}), flush=True)
    finally:
        for _, server in servers:
            server.shutdown()
            server.server_close()


if __name__ == "__main__":
    main()
