"""Ray Tune running N one-second trials on `slots` CPUs; prints the wall time as JSON.

Run with the benchmark venv (.venv-bench): python bench/peers/ray_tune_sleep.py --trials 200 --slots 2
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")

import ray
from ray import tune


def trainable(config: dict) -> None:
    time.sleep(1.0)
    tune.report({"loss": (config["x"] - 0.3) ** 2})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--slots", type=int, default=2)
    args = parser.parse_args()
    ray.init(num_cpus=args.slots, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"x": tune.uniform(0.0, 1.0)},
        tune_config=tune.TuneConfig(num_samples=args.trials, metric="loss", mode="min"),
        run_config=tune.RunConfig(
            verbose=0, storage_path=os.path.abspath(os.environ.get("RAY_STORAGE", "/tmp/ray-bench"))
        ),
    )
    started = time.monotonic()
    results = tuner.fit()
    wall = time.monotonic() - started
    errors = sum(1 for r in results if r.error)
    print(json.dumps({"system": "ray_tune", "trials": len(results), "errors": errors, "wall_s": wall}))
    ray.shutdown()


if __name__ == "__main__":
    main()
