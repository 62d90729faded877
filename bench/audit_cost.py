"""What the audit trail costs a call (servicers/audit_interceptor.py, domain/audit/recorder.py).

1. Per call: the same calls through the master's in-process call path (LocalCalls, as the REST
   gateway makes them) behind an authentication interceptor, without and with the audit
   interceptor in front and its writer storing in the background (SQLite). The handlers do
   nothing, so the difference is the audit's alone: for a change (KillExperiment,
   PatchExperiment: its targets read, its principal and status taken, its record queued, and
   the writer's share of storing it) and for a read (GetExperiment: only the table lookup).
   Wall time per call, and the process's CPU time per call (all threads: the writer's too).
2. Off the call's path: the writer storing a batch of records (one INSERT of many rows, one
   transaction) on SQLite and PostgreSQL, per row, in wall and in the writer thread's CPU time
   (which the master's other threads share through the GIL).

    .venv/bin/python -m bench.audit_cost [--calls 20000] [--rounds 5] [--rows 500]
        [--databases sqlite,postgres]

Each figure is the median of the rounds, the two sides interleaved; on a 2-core machine shared
with other work the wall times move with its load, the CPU times much less.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import psycopg2
from google.protobuf.message import Message

from cairn.api.v1 import experiment_pb2
from services.common.interceptors import AuthInterceptor
from services.common.local_calls import LocalCalls
from services.common.metadata import Metadata
from services.common.principal import Principal
from services.master.domain.audit.events import AuditRecord
from services.master.domain.audit.recorder import AuditRecorder
from services.master.domain.kernel.telemetry import Telemetry
from services.master.servicers.audit_interceptor import AuditInterceptor
from services.master.servicers.audit_methods import method_table
from services.master.store.db import Database

API = "cairn.api.v1.Cairn"
CALLS: dict[str, Message] = {
    "KillExperiment": experiment_pb2.KillExperimentRequest(id=7),
    "PatchExperiment": experiment_pb2.PatchExperimentRequest(
        experiment=experiment_pb2.PatchExperiment(id=7, description="tuned")
    ),
    "GetExperiment": experiment_pb2.GetExperimentRequest(experiment_id=7),
}
PRINCIPAL = Principal(user_id=2, username="determined")


def _register(server: Any) -> Sequence[str]:
    def handler(request_type: type[Message]) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: request,  # nothing: what is measured is around it
            request_deserializer=request_type.FromString,
            response_serializer=request_type.SerializeToString,
        )

    handlers = {name: handler(type(request)) for name, request in CALLS.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(API, handlers),))
    return [API]


def _authenticate(method: str, metadata: Metadata) -> Principal:
    return PRINCIPAL


def _per_call_us(local: LocalCalls, name: str, calls: int) -> tuple[float, float]:
    """(wall, CPU of the whole process) per call, in microseconds: the CPU includes the audit
    writer's, which runs in its own thread as in the master."""
    request = CALLS[name]
    path = f"/{API}/{name}"
    metadata = (("authorization", "Bearer t"),)
    started, started_cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        local.unary(path, request, metadata, peer="http:10.0.0.5")
    wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    return wall / calls * 1e6, cpu / calls * 1e6


def call_path(calls: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cairn-bench-audit-") as tmp:
        db = Database(f"sqlite:///{Path(tmp) / 'audit.db'}")
        db.migrate()
        telemetry = Telemetry.new()
        recorder = AuditRecorder(db, telemetry)
        recorder.start()  # the writer, storing in the background as in the master
        auth = AuthInterceptor(_authenticate)
        plain = LocalCalls(_register, [auth])
        audited = LocalCalls(_register, [AuditInterceptor(recorder.record, table=method_table()), auth])
        results: dict[str, Any] = {}
        for name in CALLS:
            samples: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}
            for _ in range(rounds):  # interleaved, so that the machine's load falls on both alike
                samples["without"].append(_per_call_us(plain, name, calls))
                samples["with"].append(_per_call_us(audited, name, calls))
            wall = {k: statistics.median(w for w, _ in v) for k, v in samples.items()}
            cpu = {k: statistics.median(c for _, c in v) for k, v in samples.items()}
            results[name] = {
                "wall_us": [round(wall["without"], 1), round(wall["with"], 1)],
                "cpu_us": [round(cpu["without"], 1), round(cpu["with"], 1)],
                "audit_cpu_us": round(cpu["with"] - cpu["without"], 1),
            }
        recorder.close()
        results["stored"] = telemetry.audit_events_written.value
        results["dropped"] = telemetry.audit_events_dropped.value
        db.dispose()
    return results


def _records(rows: int) -> list[AuditRecord]:
    now = time.time()
    return [
        AuditRecord(
            at=now,
            method="KillExperiment",
            outcome="OK",
            actor="user",
            user_id=2,
            username="determined",
            targets=(("experiment_id", str(i)),),
            address="10.0.0.5",
            transport="rest",
            duration_ms=3.2,
        )
        for i in range(rows)
    ]


def writer(url: str, rows: int, rounds: int) -> dict[str, float]:
    db = Database(url)
    db.migrate()
    recorder = AuditRecorder(db, Telemetry.new(), capacity=rows)
    wall, cpu = [], []
    for _ in range(rounds + 1):  # the first warms the connection and the statement
        for record in _records(rows):
            recorder.record(record)
        started, started_cpu = time.perf_counter(), time.thread_time()
        recorder.flush()
        wall.append((time.perf_counter() - started) / rows * 1e6)
        cpu.append((time.thread_time() - started_cpu) / rows * 1e6)
    db.dispose()
    return {
        "rows_per_batch": rows,
        "wall_us_per_row": round(statistics.median(wall[1:]), 2),
        "cpu_us_per_row": round(statistics.median(cpu[1:]), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=20_000, help="calls per round and method")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=500, help="records per written batch")
    parser.add_argument("--databases", default="sqlite,postgres")
    args = parser.parse_args()
    print(json.dumps({"call_path": call_path(args.calls, args.rounds)}), flush=True)
    for database in args.databases.split(","):
        if database == "sqlite":
            with tempfile.TemporaryDirectory(prefix="cairn-bench-audit-") as tmp:
                result = writer(f"sqlite:///{Path(tmp) / 'audit.db'}", args.rows, args.rounds)
        else:
            name = f"cairn_bench_audit_{uuid.uuid4().hex[:8]}"
            admin = psycopg2.connect(dbname="postgres")
            admin.autocommit = True
            with admin.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE {name}")
            try:
                result = writer(f"postgresql:///{name}", args.rows, args.rounds)
            finally:
                with admin.cursor() as cursor:
                    cursor.execute(f"DROP DATABASE {name}")
                admin.close()
        print(json.dumps({"writer": database, **result}), flush=True)


if __name__ == "__main__":
    main()
