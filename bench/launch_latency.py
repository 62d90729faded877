"""Launch latency: from `CreateExperiment` to the first line of user code, median of N runs.

Each run creates a one-trial experiment whose code prints its start time first thing; the latency
is that time minus the moment the client sent the request. Runs are sequential on an idle cluster.

    .venv/bin/python -m bench.launch_latency [--runs 20] [--runtimes process,docker]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.cairn_cluster import cairn_cluster
from cairn.api.v1 import trial_pb2

HERE = Path(__file__).parent
CONFIG = """
name: launch-latency
entrypoint: python3 first_line.py
searcher: {name: single, metric: loss}
max_restarts: 0
"""


def first_line_time(api, experiment_id: int) -> float:  # type: ignore[no-untyped-def]
    trial_id = (
        api.GetExperimentTrials(trial_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id))
        .trials[0]
        .id
    )
    for line in api.TrialLogs(trial_pb2.TrialLogsRequest(trial_id=trial_id)):
        if line.message.startswith("FIRST-LINE"):
            return float(line.message.split()[1])
    raise RuntimeError(f"experiment {experiment_id}: no first line in the logs")


def measure(api, runs: int) -> list[float]:  # type: ignore[no-untyped-def]
    latencies = []
    for _ in range(runs):
        sent = time.time()
        experiment_id = api.create(CONFIG, HERE / "trials" / "first_line")
        api.wait_terminal(experiment_id)
        latencies.append(first_line_time(api, experiment_id) - sent)
    return latencies


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "median_s": round(statistics.median(ordered), 3),
        "p90_s": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        "min_s": round(ordered[0], 3),
        "max_s": round(ordered[-1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--runtimes",
        default="process",
        help="comma-separated: process, docker (both: one cluster each, runs interleaved in rounds of 5)",
    )
    args = parser.parse_args()
    runtimes = args.runtimes.split(",")
    latencies: dict[str, list[float]] = {runtime: [] for runtime in runtimes}
    with contextlib.ExitStack() as stack:
        apis = {}
        for runtime in runtimes:
            state = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            apis[runtime] = stack.enter_context(cairn_cluster(state, agents=1, slots=1, runtime=runtime))
            apis[runtime].create(CONFIG, HERE / "trials" / "first_line")  # warm-up: page cache, imports
        # Interleaved rounds, so that a burst of load on the machine touches every runtime alike.
        done = 0
        while done < args.runs:
            batch = min(5, args.runs - done)
            for runtime in runtimes:
                latencies[runtime] += measure(apis[runtime], batch)
            done += batch
    result = {"runs": args.runs, **{runtime: summary(values) for runtime, values in latencies.items()}}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
