"""REST read latency under load: 10 and 25 concurrent clients on the experiments list, an
experiment's trial list and a trial's metrics, with 1,000 experiments and 10,000 trials (and their
metrics and checkpoints) stored in PostgreSQL. Reports p50 and p95 per endpoint and concurrency.

    .venv/bin/python -m bench.rest_latency [--experiments 1000] [--trials-per-experiment 10]
        [--seconds 20] [--concurrency 10,25] [--cache on|off] [--model closed,determined]
        [--http-processes 1,2]

The load comes from wrk (Debian's `wrk`, `make bench-install`), which shares this 2-core machine
with the master: the numbers are pessimistic. `--cache off` measures the master without its
read cache (servicers/read_cache.py), i.e. every request running its queries. `--http-processes`
runs the whole load once per value against a master serving its HTTP port with that many processes
(gateway/public_server.py), on the same seeded database; every line names its value and the load
average of the machine when it started.
Anchor: Determined's published load test on a large database averaged 4.6 s with p95 44 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg2
import requests
import yaml

from bench.cairn_cluster import cairn_cluster
from cairn.client.password import salt_and_hash
from services.master.domain.config import ConfigDefaults, expand_config, parse_config_text
from services.master.domain.identity.auth import AuthService
from services.master.store import models
from services.master.store.db import Database

REPO = Path(__file__).resolve().parent.parent
POINTS_PER_GROUP = 20


def seed(url: str, experiments: int, trials_per: int) -> None:
    db = Database(url)
    db.migrate()
    AuthService(db, 3600).ensure_builtin_users()
    raw = parse_config_text((REPO / "examples" / "digits" / "random.yaml").read_text())
    config = expand_config(
        raw,
        ConfigDefaults(
            checkpoint_storage={"type": "shared_fs", "host_path": "/tmp/cairn-bench-ckpt"},
            resource_pool="default",
            experiment_seed=1,
        ),
    )
    text = yaml.safe_dump(raw)
    rng = random.Random(0)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with db.transaction() as s:
        owner = s.query(models.User).filter_by(username="determined").one().id
        s.execute(
            models.Experiment.__table__.insert(),
            [
                {
                    "id": e,
                    "name": f"bench-{e}",
                    "description": "",
                    "labels": [],
                    "state": "COMPLETED",
                    "archived": False,
                    "config": config,
                    "original_config": text,
                    "owner_id": owner,
                    "start_time": start + timedelta(minutes=e),
                    "end_time": start + timedelta(minutes=e + 30),
                    "progress": 1.0,
                    "resource_pool": "default",
                    "searcher_session_id": uuid.uuid4().hex,
                    "model_definition_size": 1000,
                    "notes": "",
                    "checkpoint_gc_done": True,
                }
                for e in range(1, experiments + 1)
            ],
        )
    trial_id = 0
    for first in range(1, experiments + 1, 100):
        trials, metrics, checkpoints = [], [], []
        for e in range(first, min(first + 100, experiments + 1)):
            for _ in range(trials_per):
                trial_id += 1
                best = rng.uniform(0.8, 0.99)
                trials.append(
                    {
                        "id": trial_id,
                        "experiment_id": e,
                        "request_id": uuid.uuid4().hex,
                        "state": "COMPLETED",
                        "hparams": {
                            "learning_rate": rng.uniform(1e-4, 1e-1),
                            "hidden_size": rng.randint(16, 128),
                        },
                        "seed": trial_id,
                        "restarts": 0,
                        "run_id": 1,
                        "start_time": start,
                        "end_time": start + timedelta(minutes=10),
                        "total_batches": POINTS_PER_GROUP * 10,
                        "searcher_target": 0,
                        "searcher_stopped": False,
                        "progress": 1.0,
                        "searcher_metric_value": best,
                        "summary_metrics": {},
                        "searcher_completed_length": 0,
                    }
                )
                for step in range(1, POINTS_PER_GROUP + 1):
                    for group, value in (
                        ("training", {"loss": 1.0 / step}),
                        ("validation", {"validation_accuracy": best * step / POINTS_PER_GROUP}),
                    ):
                        metrics.append(
                            {
                                "trial_id": trial_id,
                                "trial_run_id": 1,
                                "seq": None,
                                "group_name": group,
                                "steps_completed": step * 10,
                                "report_time": start + timedelta(seconds=step),
                                "metrics": value,
                                "archived": False,
                            }
                        )
                checkpoints.append(
                    {
                        "uuid": str(uuid.uuid4()),
                        "trial_id": trial_id,
                        "allocation_id": f"{e}.{trial_id}.1",
                        "task_id": f"{e}.{trial_id}",
                        "report_time": start,
                        "state": "COMPLETED",
                        "resources": {"state.pt": 1000},
                        "metadata": {"steps_completed": POINTS_PER_GROUP * 10},
                        "steps_completed": POINTS_PER_GROUP * 10,
                        "size": 1000,
                    }
                )
        with db.transaction() as s:
            s.execute(models.Trial.__table__.insert(), trials)
            s.execute(models.Metric.__table__.insert(), metrics)
            s.execute(models.Checkpoint.__table__.insert(), checkpoints)
    with db.engine.begin() as connection:
        for table in ("experiments", "trials", "metrics"):
            connection.exec_driver_sql(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT MAX(id) FROM {table}))"
            )
    # A database in use has been vacuumed: without this the first reads of each freshly written page
    # set its hint bits (writes, during the measurement) and autovacuum wakes up mid-run to do the
    # same, which made the first endpoint measured the slowest by a factor of two to three.
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        for table in ("experiments", "trials", "metrics", "checkpoints"):
            connection.exec_driver_sql(f"VACUUM (ANALYZE) {table}")
    db.dispose()


WRK_SCRIPT = Path(__file__).parent / "wrk" / "random_reads.lua"


# Determined's published load test (performance/src/api_performance_tests.ts, k6): 25 virtual users,
# each running its suite of ~50 GETs one after another and then sleeping 1 s, over and over.
DETERMINED_SUITE = 48
DETERMINED_SLEEP_MS = 1000


def load(
    base: str,
    token: str,
    kind: str,
    clients: int,
    seconds: int,
    experiments: int,
    trials: int,
    hot: int = 0,
    model: str = "closed",
) -> dict[str, Any]:
    """`clients` connections loaded for `seconds` by wrk (a C load generator: it leaves the CPU to the
    master, unlike Python clients on the same two cores). `model` "closed": every client sends its
    next request as soon as the last one is answered; "determined": Determined's k6 load, each
    client a virtual user sending DETERMINED_SUITE requests back to back, then sleeping 1 s."""
    suite = DETERMINED_SUITE if model == "determined" else 0
    env = {
        **os.environ,
        "CAIRN_TOKEN": token,
        "CAIRN_ENDPOINT": kind,
        "CAIRN_EXPERIMENTS": str(experiments),
        "CAIRN_TRIALS": str(trials),
        "CAIRN_WORKING_SET": str(hot),
        "CAIRN_ITERATION": str(suite),
        "CAIRN_SLEEP_MS": str(DETERMINED_SLEEP_MS if suite else 0),
    }
    command = [
        "wrk",
        "-t",
        # A virtual user's requests are counted per wrk thread: one connection each.
        str(clients if suite else 2),
        "-c",
        str(clients),
        "-d",
        f"{seconds}s",
        "--timeout",
        "30s",
        "-s",
        str(WRK_SCRIPT),
        base,
    ]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True, timeout=seconds + 120)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["non_2xx"] or result["socket_errors"]:
        raise RuntimeError(f"{kind} with {clients} clients: errors in {result}")
    return {
        "model": model,
        "endpoint": kind,
        "clients": clients,
        "working_set": hot or "all",
        **result,
        "throughput_rps": round(result["requests"] / result["duration_s"], 1),
    }


def measure(args: argparse.Namespace, url: str, processes: int) -> None:
    with (
        tempfile.TemporaryDirectory() as state,
        cairn_cluster(Path(state), agents=0, slots=0, db_url=url) as api,
    ):
        base = api.http_url
        token = requests.post(
            f"{base}api/v1/auth/login",
            json={"username": "determined", "password": salt_and_hash(""), "isHashed": True},
            timeout=30,
        ).json()["token"]
        trials = args.experiments * args.trials_per_experiment
        for model in args.model.split(","):
            for kind in args.endpoints.split(","):
                for concurrency in (int(c) for c in args.concurrency.split(",")):
                    shape = (base, token, kind, concurrency)
                    more = (args.experiments, trials, args.working_set, model)
                    load(*shape, 3, *more)  # warm-up
                    load_average = round(os.getloadavg()[0], 2)
                    result = load(*shape, args.seconds, *more)
                    line = {
                        "cache": args.cache,
                        "http_processes": processes,
                        "load_1m": load_average,
                        **result,
                    }
                    print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--trials-per-experiment", type=int, default=10)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument(
        "--working-set",
        type=int,
        default=0,
        help="0: uniformly random pages/experiments/trials; N: only the first N (pages of the list, "
        "experiments, trials), like a dashboard's hot set",
    )
    parser.add_argument("--cache", choices=["on", "off"], default="on", help="the master's read cache")
    parser.add_argument("--concurrency", default="10,25")
    parser.add_argument(
        "--model",
        default="closed",
        help="comma-separated: closed (no pause between requests) and/or determined (Determined's k6 "
        f"load: {DETERMINED_SUITE} requests, then 1 s of sleep, per virtual user)",
    )
    parser.add_argument("--endpoints", default="experiments,trials,metrics")
    parser.add_argument(
        "--http-processes",
        default="1",
        help="comma-separated: processes serving the master's HTTP port, one full run each",
    )
    args = parser.parse_args()
    name = f"cairn_bench_rest_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(dbname="postgres")
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    url = f"postgresql:///{name}"
    try:
        started = time.perf_counter()
        seed(url, args.experiments, args.trials_per_experiment)
        print(json.dumps({"seeded_s": round(time.perf_counter() - started, 1)}), flush=True)
        os.environ["CAIRN_READ_CACHE"] = args.cache  # read by the master the cluster starts
        for processes in (int(p) for p in args.http_processes.split(",")):
            os.environ["CAIRN_HTTP_PROCESSES"] = str(processes)
            measure(args, url, processes)
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


if __name__ == "__main__":
    main()
