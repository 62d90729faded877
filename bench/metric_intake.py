"""Metric intake, end to end against the database's own bulk paths, side by side in one run.

Rows shaped as Cairn stores a report of ten scalars (trial, run, seq, group, steps, time, the
metrics as JSON, with Cairn's unique key and index) are written:

- PostgreSQL: by `COPY ... FROM STDIN` and by psycopg2's `execute_values` (pages of 1,000), into a
  table of the same shape in a scratch database; by Cairn: W trials on a local cluster with that
  database, each reporting N reports through the Core API as fast as it takes them
  (`report_training_metrics` every iteration), timed from the first report to the last one
  stored (the context's exit waits for that).
- SQLite: `executemany` into a WAL-mode file (Cairn's own pragmas), and Cairn on its default
  SQLite database.

    .venv/bin/python -m bench.metric_intake [--reports 20000] [--writers 1,8] [--backends postgres,sqlite]
        [--rounds 3]

Rates are reports (rows) per second; the Cairn ratios are against the same backend's COPY (or
executemany). PostgreSQL comes from CAIRN_TEST_PG_URL or the local server over its socket, as the
tests find it (`make postgres`).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import psycopg2.extras
import yaml
from psycopg2 import sql

from bench.cairn_cluster import cairn_cluster
from cairn.api.v1 import trial_pb2

HERE = Path(__file__).parent
MODEL_DIR = HERE / "trials" / "metric_writer"
NAMES = [f"metric_{i}" for i in range(10)]
COLUMNS = "trial_id, trial_run_id, seq, group_name, steps_completed, report_time, metrics, archived"
TABLE = """
CREATE TABLE bench_metrics (
  id {id_type} PRIMARY KEY,
  trial_id INTEGER NOT NULL, trial_run_id INTEGER NOT NULL, seq BIGINT, group_name VARCHAR(64) NOT NULL,
  steps_completed BIGINT NOT NULL, report_time TIMESTAMP NOT NULL, metrics JSON NOT NULL,
  batch_metrics JSON, archived BOOLEAN NOT NULL,
  UNIQUE (trial_id, trial_run_id, seq)
);
CREATE INDEX bench_metrics_steps ON bench_metrics (trial_id, group_name, steps_completed);
"""


def rows(count: int) -> Iterator[tuple[object, ...]]:
    now = datetime.now(UTC).replace(tzinfo=None)
    for step in range(1, count + 1):
        values = {name: step * 0.001 + i for i, name in enumerate(NAMES)}
        yield (1, 1, step, "training", step, now, json.dumps(values), False)


@contextmanager
def scratch_postgres() -> Iterator[str]:
    server = os.environ.get("CAIRN_TEST_PG_URL") or "postgresql:///postgres"
    name = f"cairn_bench_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(server)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    base, _, _ = server.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.close()


def postgres_copy(url: str, count: int) -> float:
    with psycopg2.connect(url) as conn, conn.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_metrics")
        cursor.execute(TABLE.format(id_type="BIGSERIAL"))
        conn.commit()
        started = time.perf_counter()
        buffer = io.StringIO()
        for row in rows(count):
            buffer.write("\t".join(str(v).replace("\\", "\\\\") for v in row) + "\n")
        buffer.seek(0)
        cursor.copy_expert(f"COPY bench_metrics ({COLUMNS}) FROM STDIN", buffer)
        conn.commit()
        return count / (time.perf_counter() - started)


def postgres_execute_values(url: str, count: int) -> float:
    with psycopg2.connect(url) as conn, conn.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_metrics")
        cursor.execute(TABLE.format(id_type="BIGSERIAL"))
        conn.commit()
        started = time.perf_counter()
        psycopg2.extras.execute_values(
            cursor, f"INSERT INTO bench_metrics ({COLUMNS}) VALUES %s", rows(count), page_size=1000
        )
        conn.commit()
        return count / (time.perf_counter() - started)


def sqlite_executemany(path: Path, count: int) -> float:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(TABLE.format(id_type="INTEGER"))
    started = time.perf_counter()
    conn.executemany(f"INSERT INTO bench_metrics ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows(count))
    conn.commit()
    rate = count / (time.perf_counter() - started)
    conn.close()
    return rate


def cairn_intake(db_url: str | None, writers: int, count: int) -> float:
    config = {
        "name": "metric-intake",
        "entrypoint": "python3 metric_writer.py",
        "searcher": {"name": "single", "metric": "loss", "smaller_is_better": True},
        "environment": {"environment_variables": [f"BENCH_REPORTS={count}"]},
        "max_restarts": 0,
    }
    with (
        tempfile.TemporaryDirectory(prefix="cairn-bench-intake-") as tmp,
        cairn_cluster(Path(tmp), agents=1, slots=writers, db_url=db_url) as api,
    ):
        ids = [api.create(yaml.safe_dump(config), MODEL_DIR) for _ in range(writers)]
        states = [api.wait_terminal(i, timeout=3600, interval=1.0) for i in ids]
        spans = []
        for experiment_id, state in zip(ids, states, strict=True):
            trial = api.GetExperimentTrials(
                trial_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id)
            ).trials[0]
            lines = [e.message for e in api.TrialLogs(trial_pb2.TrialLogsRequest(trial_id=trial.id))]
            found = [json.loads(line[6:]) for line in lines if line.startswith("BENCH ")]
            if state != "COMPLETED" or not found:
                raise SystemExit(f"writer {experiment_id} ended {state}:\n" + "\n".join(lines[-30:]))
            spans.append(found[-1])
    started = min(s["started"] for s in spans)
    stored = max(s["stored"] for s in spans)
    return writers * count / (stored - started)


def measure(backend: str, writers: list[int], reports: int) -> dict[str, float]:
    """One round: the backend's references, then Cairn with each writer count (rows/s)."""
    rates: dict[str, float] = {}
    if backend == "postgres":
        with scratch_postgres() as url:
            rates["COPY"] = postgres_copy(url, reports)
            rates["execute_values"] = postgres_execute_values(url, reports)
            for w in writers:
                rates[f"cairn x{w}"] = cairn_intake(url, w, reports)
    elif backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="cairn-bench-sqlite-") as tmp:
            rates["executemany"] = sqlite_executemany(Path(tmp) / "bench.db", reports)
        for w in writers:
            rates[f"cairn x{w}"] = cairn_intake(None, w, reports)
    else:
        raise SystemExit(f"--backends: no backend {backend!r} (postgres, sqlite)")
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reports", type=int, default=20000, help="reports per writer")
    parser.add_argument("--writers", default="1,8", help="concurrent trials, comma-separated counts")
    parser.add_argument("--backends", default="postgres,sqlite")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are shown")
    args = parser.parse_args()
    writers = [int(w) for w in args.writers.split(",")]
    backends = args.backends.split(",")
    loads = [os.getloadavg()[0]]
    rounds: dict[str, list[dict[str, float]]] = {b: [] for b in backends}
    for _ in range(args.rounds):
        for backend in backends:
            rounds[backend].append(measure(backend, writers, args.reports))
            loads.append(os.getloadavg()[0])
    print(
        f"{args.reports} reports of 10 scalars per writer, medians of {args.rounds} interleaved rounds; "
        f"load average {min(loads):.1f}-{max(loads):.1f}"
    )
    for backend in backends:
        names = list(rounds[backend][0])
        median = {n: statistics.median(r[n] for r in rounds[backend]) for n in names}
        reference_name = "COPY" if backend == "postgres" else "executemany"
        reference = median[reference_name]
        for name in names:
            unit = "reports/s" if name.startswith("cairn") else "rows/s"
            share = (
                f"  ({median[name] / reference:.1%} of {reference_name})" if name.startswith("cairn") else ""
            )
            print(f"{backend:9} {name:15} {median[name]:10.0f} {unit}{share}")


if __name__ == "__main__":
    main()
