"""The reference that fixes the benchmark's target error: random configurations trained in full.

Each training draws its hyperparameters from the search space (seeded by its index), trains
MAX_EPOCHS epochs and keeps the best validation error of any epoch (what a search's "best so far"
curve would take from it). The target is the 10th percentile of those errors: a random full
training reaches it with probability 0.1, so random search needs about ten full trainings.

    .venv/bin/python -m bench.hpo.reference [--trainings 64] [--out bench/hpo/results/reference.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from bench.hpo.accounting import quantile
from bench.hpo.budget import MAX_EPOCHS
from bench.hpo.task import Training, sample_hyperparameters
from services.common.logging import configure_logging, get_logger

log = get_logger(__name__)
TARGET_QUANTILE = 0.1
# Keeps the reference draws apart from any seed a search run uses.
REFERENCE_SEED_BASE = 1_000_000


def train_one(index: int) -> dict[str, object]:
    hparams = sample_hyperparameters(random.Random(REFERENCE_SEED_BASE + index))
    training = Training(hparams, seed=REFERENCE_SEED_BASE + index)
    started = time.monotonic()
    errors = []
    for _ in range(MAX_EPOCHS):
        training.train_epoch()
        errors.append(training.validation_error())
    return {
        "index": index,
        "hparams": asdict(hparams),
        "best_error": min(errors),
        "final_error": errors[-1],
        "seconds": round(time.monotonic() - started, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trainings", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "reference.json")
    args = parser.parse_args()
    configure_logging("bench-hpo", "console", "INFO")
    with multiprocessing.Pool(args.workers) as pool:
        runs = []
        for run in pool.imap_unordered(train_one, range(args.trainings)):
            log.info("reference training done", index=run["index"], best_error=run["best_error"])
            runs.append(run)
    runs.sort(key=lambda r: int(r["index"]))  # type: ignore[call-overload]
    best = [float(r["best_error"]) for r in runs]  # type: ignore[arg-type]
    seconds = [float(r["seconds"]) for r in runs]  # type: ignore[arg-type]
    summary = {
        "trainings": len(runs),
        "max_epochs": MAX_EPOCHS,
        "target_quantile": TARGET_QUANTILE,
        "target_error": round(quantile(best, TARGET_QUANTILE), 4),
        "median_best_error": statistics.median(best),
        "min_best_error": min(best),
        "mean_full_training_s": round(statistics.mean(seconds), 2),
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    log.info("reference written", path=str(args.out), target_error=summary["target_error"])


if __name__ == "__main__":
    main()
