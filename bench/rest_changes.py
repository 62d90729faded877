"""REST latency of a change: `PATCH /api/v1/projects/{id}` (a project's description, one unit of
work and its commit), sent by 1 and by 10 clients at once to a local cluster's master (no agents),
on SQLite or PostgreSQL. Reports p50 and p95 per concurrency. Every change is an audited call, so
this is where the audit trail would show on a change's latency (bench.rest_latency measures the
reads, which it does not record).

    .venv/bin/python -m bench.rest_changes [--requests 600] [--concurrency 1,10] [--db sqlite|postgres]

Written to run on any tree (it uses only the REST API), so the same script measures a tree with
and without the audit trail.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg2
import requests

from bench.cairn_cluster import cairn_cluster
from cairn.client.password import salt_and_hash


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def load(base: str, token: str, project: int, total: int, clients: int) -> dict[str, float]:
    latencies: list[float] = []
    lock = threading.Lock()
    each = total // clients

    def client(index: int) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {token}"
        mine: list[float] = []
        for n in range(each):
            started = time.perf_counter()
            answer = session.patch(
                f"{base}api/v1/projects/{project}", json={"description": f"bench {index}.{n}"}, timeout=30
            )
            mine.append((time.perf_counter() - started) * 1000)
            answer.raise_for_status()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return {
        "clients": clients,
        "requests": len(latencies),
        "p50_ms": round(statistics.median(latencies), 2),
        "p95_ms": round(_quantile(latencies, 0.95), 2),
        "throughput_rps": round(len(latencies) / elapsed, 1),
    }


def measure(requests_total: int, concurrency: list[int], db_url: str | None) -> None:
    with (
        tempfile.TemporaryDirectory() as state,
        cairn_cluster(Path(state), agents=0, slots=0, db_url=db_url) as api,
    ):
        base = api.http_url
        token = requests.post(
            f"{base}api/v1/auth/login",
            json={"username": "admin", "password": salt_and_hash(""), "isHashed": True},
            timeout=30,
        ).json()["token"]
        headers = {"Authorization": f"Bearer {token}"}
        workspace = requests.post(
            f"{base}api/v1/workspaces", json={"name": "bench"}, headers=headers, timeout=30
        )
        assert workspace.ok, workspace.text
        workspace_id = int(workspace.json()["workspace"]["id"])
        created = requests.post(
            f"{base}api/v1/workspaces/{workspace_id}/projects",
            json={"name": "bench-changes", "workspaceId": workspace_id},
            headers=headers,
            timeout=30,
        )
        assert created.ok, created.text
        project = int(created.json()["project"]["id"])
        for clients in concurrency:
            load(base, token, project, min(100, requests_total), clients)  # warm-up
            load_average = round(os.getloadavg()[0], 2)
            result = load(base, token, project, requests_total, clients)
            print(
                json.dumps({"db": "postgres" if db_url else "sqlite", "load_1m": load_average, **result}),
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--concurrency", default="1,10")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    concurrency = [int(c) for c in args.concurrency.split(",")]
    if args.db == "sqlite":
        measure(args.requests, concurrency, None)
        return
    name = f"cairn_bench_changes_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(dbname="postgres")
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        measure(args.requests, concurrency, f"postgresql:///{name}")
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


if __name__ == "__main__":
    main()
