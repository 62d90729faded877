"""What one gRPC call costs the master's CPU on its asyncio server, by itself: a real local cluster
(bench/cairn_cluster.py), one client calling back to back, the master's CPU (from /proc) divided by
the calls. Two calls: the health check (the server, its interceptors and the hand-over to a handler
thread, nothing else) and GetMaster (a user's token checked, one read of the cluster's message).

    .venv/bin/python -m bench.grpc_call_cost [--calls 10000]

Every call trial code makes (a dozen a trial: bench.control_plane_cost) pays the first figure before
its own work. The last line is one summary: `grpc_call_cost: health check H ms, GetMaster G ms of
the master's CPU a call`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.cairn_cluster import cairn_cluster
from bench.process_cpu import TICKS, process_stat
from cairn.api.v1 import master_pb2
from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.record import load_record

WARM_UP_CALLS = 200


def _cpu_s(pid: int) -> float:
    stat = process_stat(pid)
    if stat is None:
        raise RuntimeError(f"the master ({pid}) is gone")
    _parent, _start, user, system = stat
    return (user + system) / TICKS


def _per_call(pid: int, call: Callable[[], object], calls: int) -> tuple[float, float]:
    """The master's CPU and the client's wall time per call, in ms."""
    for _ in range(WARM_UP_CALLS):
        call()
    cpu, wall = _cpu_s(pid), time.perf_counter()
    for _ in range(calls):
        call()
    return (_cpu_s(pid) - cpu) / calls * 1000, (time.perf_counter() - wall) / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=10_000)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="cairn-grpc-call-") as scratch,
        cairn_cluster(Path(scratch) / "state", agents=1, slots=1) as api,
    ):
        record = load_record(ClusterPaths(Path(scratch) / "state").record_file)
        master = record.by_name("master") if record is not None else None
        assert master is not None, "the cluster's record names no master"
        pid = master.pid
        health = health_pb2_grpc.HealthStub(api.channel)
        check = health_pb2.HealthCheckRequest(service="")
        get_master = master_pb2.GetMasterRequest()
        figures = {
            "health check": _per_call(pid, lambda: health.Check(check), args.calls),
            "GetMaster": _per_call(pid, lambda: api.GetMaster(get_master), args.calls),
        }
    for name, (cpu_ms, wall_ms) in figures.items():
        print(f"{name:14s} {cpu_ms:.3f} ms of the master's CPU, {wall_ms:.3f} ms a call")
    print(
        f"grpc_call_cost: health check {figures['health check'][0]:.3f} ms, "
        f"GetMaster {figures['GetMaster'][0]:.3f} ms of the master's CPU a call"
    )


if __name__ == "__main__":
    main()
