"""Per-trial overhead: N one-second trials on 2 slots, side by side with Ray Tune and Optuna.

The ideal wall time is N x 1 s / slots; each system's overhead per trial is the time beyond that,
spread over its trials (in slot-seconds per trial). All three run the same sleeping trainable:
sleep one second, report one metric.

    make bench-install   # Ray Tune and Optuna into .venv-bench
    .venv/bin/python -m bench.trial_overhead [--trials 200] \
        [--systems cairn,cairn_warm,cairn_docker,ray_tune,optuna]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg2

from bench.cairn_cluster import cairn_cluster

HERE = Path(__file__).parent
REPO = HERE.parent
BENCH_PYTHON = REPO / ".venv-bench" / "bin" / "python"
SLOTS = 2


def cairn(
    trials: int, runtime: str = "process", warm: bool = False, full_exit: bool = False
) -> dict[str, object]:
    # Warm starts: declaring preload_modules (here none beyond the Core API, which is always
    # preloaded) lets the agent run each trial in an interpreter it prepared beforehand.
    # full_exit: that interpreter ends with Python's whole finalization, as before it skipped it.
    variables = ", environment_variables: [CAIRN_WARM_EXIT=full]" if full_exit else ""
    environment = f"environment: {{preload_modules: []{variables}}}" if warm else ""
    config = f"""
name: overhead
entrypoint: python3 sleep_trial.py
hyperparameters:
  x: {{type: double, minval: 0.0, maxval: 1.0}}
searcher: {{name: random, metric: loss, max_trials: {trials}, max_concurrent_trials: 16}}
max_restarts: 0
{environment}
"""
    with (
        tempfile.TemporaryDirectory() as state,
        cairn_cluster(Path(state), agents=1, slots=SLOTS, runtime=runtime) as api,
    ):
        started = time.monotonic()
        experiment_id = api.create(config, HERE / "trials" / "sleep_trial")
        outcome = api.wait_terminal(experiment_id)
        wall = time.monotonic() - started
    system = ("cairn" if runtime == "process" else f"cairn_{runtime}") + ("_warm" if warm else "")
    system += "_full_exit" if full_exit else ""
    return {"system": system, "trials": trials, "state": outcome, "wall_s": wall}


def cairn_warm(trials: int) -> dict[str, object]:
    """The process runtime with warm starts (environment.preload_modules)."""
    return cairn(trials, warm=True)


def cairn_warm_full_exit(trials: int) -> dict[str, object]:
    """Warm starts whose interpreters end with Python's whole finalization (CAIRN_WARM_EXIT=full)."""
    return cairn(trials, warm=True, full_exit=True)


def cairn_docker(trials: int) -> dict[str, object]:
    """The same on the Docker runtime: every trial in a container of the task image."""
    return cairn(trials, runtime="docker")


def peer(script: str, trials: int, *extra: str) -> dict[str, object]:
    if not BENCH_PYTHON.exists():
        raise SystemExit("the peers need .venv-bench: run `make bench-install` first")
    out = subprocess.run(
        [
            str(BENCH_PYTHON),
            str(HERE / "peers" / script),
            "--trials",
            str(trials),
            "--slots",
            str(SLOTS),
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=7200,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def optuna(trials: int) -> dict[str, object]:
    name = f"optuna_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(dbname="postgres")
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        return peer("optuna_sleep.py", trials, "--storage", f"postgresql+psycopg2:///{name}")
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def ray_tune(trials: int) -> dict[str, object]:
    return peer("ray_tune_sleep.py", trials)


SYSTEMS = {
    "cairn": cairn,
    "cairn_warm": cairn_warm,
    "cairn_warm_full_exit": cairn_warm_full_exit,
    "cairn_docker": cairn_docker,
    "ray_tune": ray_tune,
    "optuna": optuna,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--systems", default="cairn,cairn_warm,ray_tune,optuna")
    args = parser.parse_args()
    ideal = args.trials * 1.0 / SLOTS
    rows = []
    for name in args.systems.split(","):
        result = SYSTEMS[name](args.trials)
        wall = float(result["wall_s"])  # type: ignore[arg-type]
        result["ideal_s"] = ideal
        result["wall_over_ideal"] = round(wall / ideal, 3)
        result["overhead_per_trial_s"] = round((wall - ideal) * SLOTS / args.trials, 3)
        rows.append(result)
        print(json.dumps(result), flush=True)
    print(json.dumps({"summary": {r["system"]: r["overhead_per_trial_s"] for r in rows}}), file=sys.stderr)


if __name__ == "__main__":
    main()
