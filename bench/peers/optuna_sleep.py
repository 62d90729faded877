"""Optuna with PostgreSQL storage: `slots` worker processes share N one-second trials; prints the
wall time (from the workers' start to the last trial's end) as JSON.

Run with the benchmark venv (.venv-bench):
    python bench/peers/optuna_sleep.py --trials 200 --slots 2 --storage postgresql:///optuna_bench
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time

import optuna


def objective(trial: optuna.Trial) -> float:
    x = trial.suggest_float("x", 0.0, 1.0)
    time.sleep(1.0)
    return (x - 0.3) ** 2


def worker(storage: str, study_name: str, trials: int) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=study_name, storage=storage)
    study.optimize(objective, n_trials=trials)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--storage", required=True)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = f"sleep-{int(time.time())}"
    optuna.create_study(study_name=name, storage=args.storage, sampler=optuna.samplers.RandomSampler(seed=0))
    per_worker = [
        args.trials // args.slots + (1 if i < args.trials % args.slots else 0) for i in range(args.slots)
    ]
    processes = [multiprocessing.Process(target=worker, args=(args.storage, name, n)) for n in per_worker]
    started = time.monotonic()
    for p in processes:
        p.start()
    for p in processes:
        p.join()
    wall = time.monotonic() - started
    study = optuna.load_study(study_name=name, storage=args.storage)
    print(json.dumps({"system": "optuna_postgres", "trials": len(study.trials), "wall_s": wall}))


if __name__ == "__main__":
    main()
