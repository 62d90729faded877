"""A throwaway stand-in for a Cairn service, run by the supervisor tests as `python -m <module>`.

It takes the real services' flags, serves gRPC health on its port, writes its ready file the way
services do, and can misbehave on request (environment variables) so the supervisor's error
paths run against real processes:
  STAND_IN_FAIL_ROLE=<role>       that role prints a message and exits 3 before it is ready
  STAND_IN_AGENT_NO_ID=1          agents never add "agent_id" to their ready file
  STAND_IN_IGNORE_SIGTERM=<role>  that role ignores SIGTERM
Every instance starts one helper in its own process group (left behind on exit, as a careless
service would), and agents start a "trial" in a new session and record it the way agents do.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc


def write_ready(path: str, data: dict[str, object]) -> None:
    target = Path(path)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(target)


def join_tokens_handler() -> grpc.GenericRpcHandler:
    """The one call the supervisor makes of a master: a join token for each agent it starts. The
    stand-in runs without Cairn's packages on its path, so the two small messages are written by
    hand (CreateAgentJoinTokenRequest.agent_id is field 1, the response's token field 2)."""

    def create(request: bytes, context: grpc.ServicerContext) -> bytes:
        presented = dict(context.invocation_metadata()).get("x-cairn-cluster-token")
        if presented != os.environ.get("CAIRN_CLUSTER_TOKEN"):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "not the cluster token")
        agent_id = request[2 : 2 + request[1]] if request[:1] == b"\x0a" else b""
        token = b"join-" + agent_id
        return b"\x12" + bytes([len(token)]) + token

    return grpc.method_handlers_generic_handler(
        "cairn.api.v1.Cairn",
        {"CreateAgentJoinToken": grpc.unary_unary_rpc_method_handler(create)},
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file")
    parser.add_argument("--http-port", type=int, default=None)
    parser.add_argument("--agent-id", default=None)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--scheduler-addr", default=None)
    args, _unknown = parser.parse_known_args()
    role = "agent" if args.agent_id else "master" if args.http_port is not None else "internal"
    name = args.agent_id or role
    print(f"stand-in {name} starting with {sys.argv[1:]}", flush=True)
    assert os.environ.get("CAIRN_CLUSTER_TOKEN"), "the supervisor passes the cluster token"

    if os.environ.get("STAND_IN_FAIL_ROLE") == role:
        print(f"stand-in {name}: failing on purpose", flush=True)
        sys.exit(3)
    if os.environ.get("STAND_IN_IGNORE_SIGTERM") == role:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if role == "master":
        server.add_generic_rpc_handlers([join_tokens_handler()])
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    server.start()

    ready: dict[str, object] = {"pid": os.getpid(), "grpc_port": port, "helper_pid": helper.pid}
    if role == "master":
        ready["http_port"] = args.http_port or port + 1
    if role == "agent":
        trial = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
        )
        # Where the real agent records the command it runs (cairn.agent_files).
        meta = Path(args.work_dir) / "containers" / "c-1" / ".cairn-agent"
        meta.mkdir(parents=True, exist_ok=True)
        (meta / "child.json").write_text(json.dumps({"pid": trial.pid, "pgid": trial.pid}))
        ready["trial_pid"] = trial.pid
        if not os.environ.get("STAND_IN_AGENT_NO_ID"):
            ready["agent_id"] = args.agent_id
    write_ready(args.ready_file, ready)

    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if os.environ.get("STAND_IN_IGNORE_SIGTERM") != role:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    print(f"stand-in {name} stopping", flush=True)
    server.stop(0)


if __name__ == "__main__":
    main()
