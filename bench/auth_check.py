"""The cost of checking a caller's token, per call (domain/identity/auth.py): what every gRPC
call, REST request, proxied request and websocket handshake pays before anything else.

    .venv/bin/python -m bench.auth_check [--calls 20000] [--db sqlite,postgres]

Three paths, each timed over `--calls` checks of one token in a loop, on SQLite and PostgreSQL
(a scratch database on the local server):
- remembered: the token was checked less than TOKEN_RECHECK_SECONDS ago and no credential has
  ended since: a sha256, a lock and a dict lookup;
- database: the memory is off (every check reads the row: one lookup by the token's hash through
  its unique index, joined with its user), as after every revocation, logout or user change;
- after revocations: a revocation every 100 checks (a busy cluster revoking tokens all day long
  would not come close), so one check in a hundred reads the database.
Goal: a few tens of µs per call on the path calls take (the remembered one).

And what a REST call in the master's process pays for the caller-first order: the refusal of
requests the gateway could not build runs as a last interceptor of every in-process call
(services/common/server.py `with_request_checks`); `local_call` times an in-process call of the
gRPC health check with and without it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2

from services.master.domain.identity import auth
from services.master.domain.identity.auth import AuthService
from services.master.store.db import Database


@contextmanager
def database(kind: str) -> Iterator[Database]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as home:
            db = Database(f"sqlite:///{Path(home) / 'master.db'}")
            db.migrate()
            yield db
            db.dispose()
        return
    name = f"cairn_bench_auth_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(dbname="postgres")
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        db = Database(f"postgresql:///{name}")
        db.migrate()
        yield db
        db.dispose()
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def per_call_us(calls: int, check: Callable[[int], object]) -> dict[str, float]:
    """Median and p95 of the per-call cost over batches of 100 calls, in µs."""
    batches = []
    for start in range(0, calls, 100):
        began = time.perf_counter()
        for i in range(start, start + 100):
            check(i)
        batches.append((time.perf_counter() - began) / 100 * 1e6)
    batches.sort()
    return {
        "median_us": round(statistics.median(batches), 1),
        "p95_us": round(batches[int(len(batches) * 0.95)], 1),
    }


def measure(kind: str, calls: int) -> None:
    with database(kind) as db:
        service = AuthService(db, 3600)
        service.ensure_builtin_users()
        token, _ = service.login("determined", "", is_hashed=False)
        service.authenticate_user_token(token)
        paths: dict[str, Callable[[int], object]] = {
            "remembered": lambda i: service.authenticate_user_token(token),
            "database": lambda i: (service.credentials_changed(), service.authenticate_user_token(token)),
            "after_revocations": lambda i: (
                service.credentials_changed() if i % 100 == 0 else None,
                service.authenticate_user_token(token),
            ),
        }
        for name, check in paths.items():
            per_call_us(min(calls, 1000), check)  # warm
            result = per_call_us(calls if name != "database" else min(calls, 5000), check)
            print(json.dumps({"db": kind, "path": name, **result}), flush=True)


def local_call_us(calls: int) -> None:
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from services.common.local_calls import LocalCalls
    from services.common.server import with_request_checks

    def register(server: Any) -> list[str]:
        health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
        return []

    request = health_pb2.HealthCheckRequest()
    for name, interceptors in (("without", []), ("with_request_checks", with_request_checks([]))):
        local = LocalCalls(register, interceptors)

        def call(i: int, local: LocalCalls = local) -> object:
            return local.unary("/grpc.health.v1.Health/Check", request, [("authorization", "Bearer x")])

        per_call_us(1000, call)
        print(json.dumps({"local_call": name, **per_call_us(calls, call)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--db", default="sqlite,postgres")
    args = parser.parse_args()
    print(json.dumps({"recheck_s": auth.TOKEN_RECHECK_SECONDS}), flush=True)
    for kind in args.db.split(","):
        measure(kind, args.calls)
    local_call_us(args.calls)


if __name__ == "__main__":
    main()
