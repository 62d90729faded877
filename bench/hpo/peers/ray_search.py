"""Ray Tune's side of the search-quality benchmark: random search with the ASHAScheduler.

Ray runs on 2 CPUs with one CPU per trial, so two trials train at once. Each trial trains the
benchmark task an epoch at a time and reports the validation error with `epochs` (ASHA's time
attribute). A stopper in the driver counts every reported epoch, keeps the reports, and stops the
whole search once the budget is spent.

Run with the benchmark venv (.venv-bench) from the repository root:
    .venv-bench/bin/python -m bench.hpo.peers.ray_search --seed 0 --budget 20 \
        --out bench/hpo/results/ray_asha-seed0.json
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")

# Ray lives in .venv-bench only; where mypy runs (.venv) it is not installed.
import ray  # type: ignore[import-not-found]
from ray import tune
from ray.tune.schedulers import ASHAScheduler  # type: ignore[import-not-found]
from ray.tune.search.basic_variant import BasicVariantGenerator  # type: ignore[import-not-found]

from bench.hpo.accounting import EpochReport, epochs_for
from bench.hpo.budget import MAX_EPOCHS, REDUCTION_FACTOR
from bench.hpo.record import ENDED_BY_BUDGET, ENDED_BY_SEARCH, RunRecord, plain_hparams, write_record
from bench.hpo.task import (
    BATCH_SIZES,
    DEPTH,
    DROPOUT,
    LEARNING_RATE,
    WEIGHT_DECAY,
    WIDTH,
    Hyperparameters,
    Training,
)

CPUS = 2
# Far more samples than a budget can pay for: the budget, not num_samples, ends every run.
NUM_SAMPLES = 1000
SYSTEM = "ray_asha"


def trainable(config: dict[str, Any]) -> None:
    hparams = Hyperparameters.from_mapping({k: v for k, v in config.items() if k != "seed"})
    training = Training(hparams, seed=int(config["seed"]))
    for _ in range(MAX_EPOCHS):
        training.train_epoch()
        tune.report(
            {
                "validation_error": training.validation_error(),
                "epochs": training.epochs,
                "wall_time": time.time(),
            }
        )


class BudgetStopper(tune.Stopper):  # type: ignore[misc]
    """Keeps every report the driver sees and stops everything once they pass the budget."""

    def __init__(self, budget_epochs: int) -> None:
        self.budget_epochs = budget_epochs
        self.reports: list[EpochReport] = []
        self.trials: set[str] = set()
        self.hparams: dict[str, dict[str, Any]] = {}

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        if "validation_error" in result:
            self.trials.add(trial_id)
            if trial_id not in self.hparams and "config" in result:
                self.hparams[trial_id] = plain_hparams(result["config"])
            self.reports.append(
                EpochReport(
                    trial=trial_id,
                    epoch=int(result["epochs"]),
                    error=float(result["validation_error"]),
                    wall_time=float(result["wall_time"]),
                )
            )
        return False

    def stop_all(self) -> bool:
        return len(self.reports) >= self.budget_epochs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--budget", type=float, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    budget_epochs = epochs_for(args.budget, MAX_EPOCHS)
    stopper = BudgetStopper(budget_epochs)
    ray.init(num_cpus=CPUS, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    with tempfile.TemporaryDirectory(prefix="ray-hpo-") as storage:
        tuner = tune.Tuner(
            tune.with_resources(trainable, {"cpu": 1}),
            param_space={
                "learning_rate": tune.loguniform(*LEARNING_RATE),
                "weight_decay": tune.loguniform(*WEIGHT_DECAY),
                # randint's upper bound is exclusive.
                "width": tune.randint(WIDTH[0], WIDTH[1] + 1),
                "depth": tune.randint(DEPTH[0], DEPTH[1] + 1),
                "dropout": tune.uniform(*DROPOUT),
                "batch_size": tune.choice(list(BATCH_SIZES)),
                "seed": tune.randint(0, 2**31 - 1),
            },
            tune_config=tune.TuneConfig(
                metric="validation_error",
                mode="min",
                search_alg=BasicVariantGenerator(random_state=args.seed),
                scheduler=ASHAScheduler(
                    time_attr="epochs",
                    max_t=MAX_EPOCHS,
                    grace_period=1,
                    reduction_factor=REDUCTION_FACTOR,
                ),
                num_samples=NUM_SAMPLES,
                max_concurrent_trials=CPUS,
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(verbose=0, storage_path=storage, stop=stopper),
        )
        started = time.monotonic()
        started_at = time.time()
        tuner.fit()
        wall = time.monotonic() - started
    ray.shutdown()
    write_record(
        args.out,
        RunRecord(
            system=SYSTEM,
            seed=args.seed,
            budget=args.budget,
            max_epochs=MAX_EPOCHS,
            wall_s=wall,
            trials=len(stopper.trials),
            ended_by=ENDED_BY_BUDGET if len(stopper.reports) >= budget_epochs else ENDED_BY_SEARCH,
            reports=stopper.reports,
            hparams=stopper.hparams,
            started_at=started_at,
            settings={
                "ray": ray.__version__,
                "search": "BasicVariantGenerator(random_state=seed)",
                "scheduler": f"ASHAScheduler(time_attr=epochs, max_t={MAX_EPOCHS}, grace_period=1, "
                f"reduction_factor={REDUCTION_FACTOR})",
                "resources": "num_cpus=2, 1 CPU per trial, reuse_actors=True",
            },
        ),
    )


if __name__ == "__main__":
    main()
