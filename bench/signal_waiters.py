"""Many calls waiting for allocation signals against a real master: do other calls still get answers?

Every running trial keeps a WatchAllocationSignals stream open (a stock Determined client keeps its
preemption long poll instead), and each waiting call holds one of the master's gRPC threads. This
opens --watches such streams (on one asyncio loop, as admin, on the pending allocations of an
experiment of --trials trials on a local cluster with no agents) and then times --calls ordinary
calls (GetExperiment) one after another, each with a deadline of --deadline seconds.

The master runs with its pool made small so that a few hundred streams reach its bounds on this
machine: --max-agents 1 and --max-log-followers 1 (the pool is rpc_workers 256 + 1 + 1, plus
--max-signal-waiters on a master that has that setting). A master without the bound (before
thread_slots.SignalWaitSlots) gives every stream a thread until the pool is spent, and then answers
nothing else; one with the bound lets --max-signal-waiters streams wait, tells the others the state
and ends them with RESOURCE_EXHAUSTED (the Core API asks again ~10 s later).

    .venv/bin/python -m bench.signal_waiters [--watches 400] [--max-signal-waiters 100]

Reported: how the streams ended (waiting, RESOURCE_EXHAUSTED, other), the ordinary calls' latency
(median, max) or how many got no answer, the master's thread count, and the master's CPU over
--idle-s seconds in which nothing happens but the streams' waiting (each used to read its state
twice every 5 s). Run it from a worktree of an
older commit for the side-by-side; everything it starts is stopped and removed when it ends.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import grpc
import grpc.aio

from bench.cairn_cluster import cairn_cluster
from bench.scale import CONFIG, MODEL_DIR
from cairn.api.v1 import api_pb2_grpc, experiment_pb2, task_pb2
from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.record import load_record


def master_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def master_threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return -1


async def watch_all(
    address: str, metadata: list[tuple[str, str]], allocations: list[str], n: int, settle_s: float
) -> tuple[dict[str, int], list[grpc.aio.UnaryStreamCall]]:
    """Open n streams round-robin over the allocations; after settle_s, how each stands."""
    channel = grpc.aio.insecure_channel(address)
    stub = api_pb2_grpc.CairnStub(channel)
    outcome = {"first_state": 0, "waiting": 0, "resource_exhausted": 0, "other_error": 0}
    calls = []

    async def one(allocation_id: str) -> None:
        call = stub.WatchAllocationSignals(
            task_pb2.WatchAllocationSignalsRequest(allocation_id=allocation_id), metadata=metadata
        )
        calls.append(call)
        try:
            await call.read()  # the state as it is
            outcome["first_state"] += 1
            await call.read()  # the next signal, or the stream's end
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                outcome["resource_exhausted"] += 1
            elif exc.code() != grpc.StatusCode.CANCELLED:
                outcome["other_error"] += 1

    tasks = [asyncio.create_task(one(allocations[i % len(allocations)])) for i in range(n)]
    await asyncio.sleep(settle_s)
    outcome["waiting"] = sum(1 for task in tasks if not task.done())
    return outcome, calls


def run(args: argparse.Namespace) -> dict[str, object]:
    env = {
        "CAIRN_MAX_AGENTS": "1",
        "CAIRN_MAX_LOG_FOLLOWERS": "1",
        "CAIRN_MAX_SIGNAL_WAITERS": str(args.max_signal_waiters),
    }
    with (
        tempfile.TemporaryDirectory(prefix="cairn-signal-waiters-") as tmp,
        cairn_cluster(Path(tmp), agents=0, slots=1, extra_env=env) as api,
    ):
        record = load_record(ClusterPaths(Path(tmp)).record_file)
        assert record is not None and record.master_grpc_address
        master = record.by_name("master")
        assert master is not None
        experiment_id = api.create(CONFIG.format(trials=args.trials, top=args.trials - 1), MODEL_DIR)
        database = next(Path(tmp).glob("**/cairn.db"))
        deadline = time.monotonic() + 60
        allocations: list[str] = []
        while len(allocations) < args.trials and time.monotonic() < deadline:
            with sqlite3.connect(database) as con:
                allocations = [row[0] for row in con.execute("select id from allocations")]
            time.sleep(0.2)
        threads_before = master_threads(master.pid)

        async def scenario() -> dict[str, object]:
            outcome, calls = await watch_all(
                record.master_grpc_address, api.metadata, allocations, args.watches, args.settle
            )
            latencies, unanswered = [], 0
            for _ in range(args.calls):
                started = time.perf_counter()
                try:
                    await asyncio.to_thread(
                        api.stub.GetExperiment,
                        experiment_pb2.GetExperimentRequest(experiment_id=experiment_id),
                        metadata=api.metadata,
                        timeout=args.deadline,
                    )
                    latencies.append(time.perf_counter() - started)
                except grpc.RpcError:
                    unanswered += 1
                    if unanswered >= 2:
                        break  # the master answers nothing: no need to wait out every deadline
            threads = master_threads(master.pid)
            cpu_before = master_cpu_s(master.pid)
            await asyncio.sleep(args.idle_s)
            idle_cpu = master_cpu_s(master.pid) - cpu_before
            for call in calls:
                call.cancel()
            return {
                "watches": args.watches,
                "max_signal_waiters": args.max_signal_waiters,
                "streams": outcome,
                "calls_answered": len(latencies),
                "calls_unanswered": unanswered,
                "call_p50_ms": round(statistics.median(latencies) * 1000, 1) if latencies else None,
                "call_max_ms": round(max(latencies) * 1000, 1) if latencies else None,
                "master_threads_before": threads_before,
                "master_threads_with_the_streams": threads,
                "master_cpu_share_while_idle": round(idle_cpu / args.idle_s, 3),
            }

        return asyncio.run(scenario())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--watches", type=int, default=400)
    parser.add_argument("--max-signal-waiters", type=int, default=100)
    parser.add_argument("--trials", type=int, default=20, help="allocations the streams are spread over")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=10.0, help="seconds each ordinary call may take")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds the streams get to open")
    parser.add_argument("--idle-s", type=float, default=20.0, help="seconds of the idle CPU measure")
    print(json.dumps(run(parser.parse_args())), flush=True)


if __name__ == "__main__":
    main()
