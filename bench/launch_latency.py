"""Launch latency: from `CreateExperiment` to the first line of user code, median of N runs.

Each run creates a one-trial experiment whose code prints its start time first thing; the latency
is that time minus the moment the client sent the request. Runs are sequential on an idle cluster.

    .venv/bin/python bench/launch_latency.py [--runs 20]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    latencies = []
    with tempfile.TemporaryDirectory() as state, cairn_cluster(Path(state), agents=1, slots=1) as api:
        api.create(CONFIG, HERE / "trials" / "first_line")  # warm-up: page cache, first imports
        for _ in range(args.runs):
            sent = time.time()
            experiment_id = api.create(CONFIG, HERE / "trials" / "first_line")
            api.wait_terminal(experiment_id)
            latencies.append(first_line_time(api, experiment_id) - sent)
    result = {
        "runs": args.runs,
        "median_s": round(statistics.median(latencies), 3),
        "p90_s": round(sorted(latencies)[int(0.9 * (len(latencies) - 1))], 3),
        "min_s": round(min(latencies), 3),
        "max_s": round(max(latencies), 3),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
