"""What reporting every step costs a training loop: a trial of 1 ms CPU steps runs alternating
phases without and with `report_training_metrics` + `should_preempt` every step, on a real local
cluster (one agent, SQLite), and prints the CPU time (all of the trial process's threads: the
shipper's batching and sending count) and wall time each phase took. The goal (issue 14): under
1 % more CPU with reporting than without.

    .venv/bin/python -m bench.core_api_cost [--steps 2000] [--rounds 5] [--tensorboard AUTO|MANUAL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import yaml

from bench.cairn_cluster import cairn_cluster
from cairn.api.v1 import trial_pb2

HERE = Path(__file__).parent
MODEL_DIR = HERE / "trials" / "report_cost"


def run(steps: int, rounds: int, tensorboard: str = "AUTO") -> dict[str, object]:
    config = {
        "name": "core-api-cost",
        "entrypoint": "python3 report_cost.py",
        "searcher": {"name": "single", "metric": "loss", "smaller_is_better": True},
        "environment": {
            "environment_variables": [
                f"BENCH_STEPS={steps}",
                f"BENCH_ROUNDS={rounds}",
                f"BENCH_TENSORBOARD={tensorboard}",
            ],
        },
        "max_restarts": 0,
    }
    with (
        tempfile.TemporaryDirectory(prefix="cairn-bench-core-cost-") as tmp,
        cairn_cluster(Path(tmp), agents=1, slots=1) as api,
    ):
        experiment_id = api.create(yaml.safe_dump(config), MODEL_DIR)
        state = api.wait_terminal(experiment_id, timeout=1800)
        trials = api.GetExperimentTrials(
            trial_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id)
        ).trials
        lines = [entry.message for entry in api.TrialLogs(trial_pb2.TrialLogsRequest(trial_id=trials[0].id))]
    found = [line for line in lines if line.startswith("BENCH ")]
    if state != "COMPLETED" or not found:
        raise SystemExit(f"the bench trial ended {state}; its log:\n" + "\n".join(lines[-40:]))
    return json.loads(found[-1].removeprefix("BENCH "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=2000, help="steps per phase")
    parser.add_argument("--rounds", type=int, default=5, help="quiet/reporting phase pairs")
    parser.add_argument(
        "--tensorboard",
        choices=["AUTO", "MANUAL"],
        default="AUTO",
        help="the trial's TensorboardMode (AUTO, the default, also writes reports as TensorBoard scalars)",
    )
    args = parser.parse_args()
    result = run(args.steps, args.rounds, args.tensorboard)
    rounds = result["rounds"]
    assert isinstance(rounds, list)
    cpu = [r["report_cpu"] / r["quiet_cpu"] - 1 for r in rounds]
    wall = [r["report_wall"] / r["quiet_wall"] - 1 for r in rounds]
    per_report_us = [(r["report_cpu"] - r["quiet_cpu"]) / args.steps * 1e6 for r in rounds]
    # Of that, what the training thread itself spent (the calls), the rest being other threads'.
    in_calls_us = [(r["report_own"] - r["quiet_own"]) / args.steps * 1e6 for r in rounds]
    print(f"{args.steps} steps of 1 ms per phase, {args.rounds} rounds, TensorboardMode.{args.tensorboard}")
    print(
        f"extra CPU with reporting: median {statistics.median(cpu):+.2%}  (each round: "
        + ", ".join(f"{c:+.2%}" for c in cpu)
        + ")"
    )
    print(f"extra wall time:          median {statistics.median(wall):+.2%}")
    print(f"CPU per report:           median {statistics.median(per_report_us):.1f} us")
    print(f"  of it in the calls:     median {statistics.median(in_calls_us):.1f} us")


if __name__ == "__main__":
    main()
