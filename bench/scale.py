"""Bulk operations at scale: creating and killing an experiment of many trials.

A local cluster with no agents (every trial stays pending, so nothing but the bulk paths is
measured) on PostgreSQL (a scratch database, dropped afterwards) or SQLite (a temporary state
directory). For each --trials N, in --rounds rounds:

- create: the CreateExperiment call for a grid of N one-slot trials, until it returns;
- all trials: from the call until every trial exists and the searcher has heard of each (the
  master's `cairn_searcher_events_pending` back at zero);
- kill: the KillExperiment call, until it returns;
- killed: from the kill until the experiment is CANCELED (every trial ended).

With the N trials pending it also reads, from /metrics (`cairn_scheduling_pass_seconds`), the
mean duration of the scheduling passes that one change sets off (a one-trial experiment created
beside them), and how many passes run in the 12 s after, when nothing changes.

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


def pass_totals(api: Api) -> tuple[float, float]:
    """(count, sum) of the scheduling passes so far."""
    return (
        metric_value(api, "cairn_scheduling_pass_seconds_count"),
        metric_value(api, "cairn_scheduling_pass_seconds_sum"),
    )


def pass_after_change(api: Api, trials: int) -> tuple[float, float]:
    """With `trials` pending: the mean duration of the passes that one change (a one-trial
    experiment created beside them) sets off, and how many passes run in 12 s with nothing
    changing."""
    count0, sum0 = pass_totals(api)
    poke = api.create(CONFIG.format(trials=1, top=1), MODEL_DIR)
    time.sleep(2)
    count1, sum1 = pass_totals(api)
    time.sleep(12)
    count2, _ = pass_totals(api)
    api.KillExperiment(experiment_pb2.KillExperimentRequest(id=poke))
    api.wait_terminal(poke, timeout=120, interval=0.1)
    mean = (sum1 - sum0) / (count1 - count0) if count1 > count0 else float("nan")
    return mean, count2 - count1


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
    time.sleep(3)  # settled
    pass_s, idle_passes = pass_after_change(api, trials)
    started = time.perf_counter()
    api.KillExperiment(experiment_pb2.KillExperimentRequest(id=experiment_id))
    kill = time.perf_counter() - started
    state = api.wait_terminal(experiment_id, timeout=600, interval=0.1)
    killed = time.perf_counter() - started
    assert state == "CANCELED", state
    return {
        "create": created,
        "all trials": all_trials,
        "kill": kill,
        "killed": killed,
        "pass": pass_s,
        "idle passes": idle_passes,
    }


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
                f"{key} {value * 1000:.0f} ms"
                if key == "pass"
                else f"{key} {value:.0f} in 12 s"
                if key == "idle passes"
                else f"{key} {value:.2f} s"
                for key, value in figures.items()
            )
            print(f"{backend:9} {trials:6} trials: {shown}", flush=True)


if __name__ == "__main__":
    main()
