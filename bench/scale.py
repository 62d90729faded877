"""Bulk operations at scale: creating and killing an experiment of many trials.

A local cluster with no agents (every trial stays pending, so nothing but the bulk paths is
measured) on PostgreSQL (a scratch database, dropped afterwards) or SQLite (a temporary state
directory). For each --trials N, in --rounds rounds:

- create: the CreateExperiment call for a grid of N one-slot trials, until it returns;
- all trials: from the call until every trial exists and the searcher has heard of each (the
  master's `cairn_searcher_events_pending` back at zero);
- kill: the KillExperiment call, until it returns;
- killed: from the kill until the experiment is CANCELED (every trial ended).

It also reads the scheduling passes' durations from /metrics (`cairn_scheduling_pass_seconds`)
while N trials are pending.

    .venv/bin/python -m bench.scale [--trials 2000,10000] [--backends postgres,sqlite] [--rounds 3]

Medians over the rounds; everything it starts is stopped and removed when it ends.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.cairn_cluster import Api, cairn_cluster
from bench.metric_intake import scratch_postgres
from cairn.api.v1 import experiment_pb2

HERE = Path(__file__).parent
MODEL_DIR = HERE / "trials" / "sleep_trial"
CONFIG = """
name: scale-{trials}
entrypoint: python3 sleep_trial.py
searcher:
  name: grid
  metric: loss
  smaller_is_better: true
  max_length: 1
  max_concurrent_trials: 0  # all at once (Determined: 0 is no limit)
max_restarts: 0
hyperparameters:
  x:
    type: int
    minval: 0
    maxval: {top}
    count: {trials}
"""


def metric_value(api: Api, name: str) -> float:
    with urllib.request.urlopen(f"{api.http_url}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    total = 0.0
    for match in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.M):
        total += float(match.group(1))
    return total


BUCKET = r'^cairn_scheduling_pass_seconds_bucket{le="([^"]+)"} ([0-9.]+)$'


def pass_quantile(api: Api, q: float) -> float:
    """The q-quantile of the scheduling passes so far, from the histogram's buckets (upper bound)."""
    with urllib.request.urlopen(f"{api.http_url}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    buckets = [
        (float("inf") if le == "+Inf" else float(le), float(count))
        for le, count in re.findall(BUCKET, text, re.M)
    ]
    if not buckets or buckets[-1][1] == 0:
        return float("nan")
    wanted = q * buckets[-1][1]
    return next(le for le, count in buckets if count >= wanted)


def wait_for(predicate, timeout: float, interval: float = 0.05) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.perf_counter() - start
        time.sleep(interval)
    raise TimeoutError("timed out")


def one_round(api: Api, trials: int) -> dict[str, float]:
    config = CONFIG.format(trials=trials, top=trials - 1)
    started = time.perf_counter()
    experiment_id = api.create(config, MODEL_DIR)
    created = time.perf_counter() - started

    def all_heard() -> bool:
        exp = api.GetExperiment(experiment_pb2.GetExperimentRequest(experiment_id=experiment_id))
        return exp.experiment.num_trials >= trials and metric_value(api, "cairn_searcher_events_pending") == 0

    all_trials = created + wait_for(all_heard, timeout=600, interval=0.1)
    time.sleep(3)  # a few scheduling passes with everything pending
    p95 = pass_quantile(api, 0.95)
    started = time.perf_counter()
    api.KillExperiment(experiment_pb2.KillExperimentRequest(id=experiment_id))
    kill = time.perf_counter() - started
    state = api.wait_terminal(experiment_id, timeout=600, interval=0.1)
    killed = time.perf_counter() - started
    assert state == "CANCELED", state
    return {"create": created, "all trials": all_trials, "kill": kill, "killed": killed, "pass p95": p95}


def run(db_url: str | None, trials: int, rounds: int) -> dict[str, float]:
    results: list[dict[str, float]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        cairn_cluster(Path(tmp), agents=0, slots=1, db_url=db_url) as api,
    ):
        for _ in range(rounds):
            results.append(one_round(api, trials))
    return {key: statistics.median(r[key] for r in results) for key in results[0]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", default="2000,10000")
    parser.add_argument("--backends", default="postgres,sqlite")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for backend in args.backends.split(","):
        for trials in (int(t) for t in args.trials.split(",")):
            if backend == "postgres":
                with scratch_postgres() as url:
                    figures = run(url, trials, args.rounds)
            elif backend == "sqlite":
                figures = run(None, trials, args.rounds)
            else:
                raise SystemExit(f"--backends: no backend {backend!r} (postgres, sqlite)")
            shown = ", ".join(
                f"{key} {value * 1000:.1f} ms" if key == "pass p95" else f"{key} {value:.2f} s"
                for key, value in figures.items()
            )
            print(f"{backend:9} {trials:6} trials: {shown}", flush=True)


if __name__ == "__main__":
    main()
