"""Optuna's side of the search-quality benchmark: TPE with a successive-halving or Hyperband pruner.

Two worker processes share one study in PostgreSQL storage (a fresh database per run, made and
dropped by the caller). Each trial trains the benchmark task an epoch at a time, reports the
validation error to the pruner and stops when pruned. A counter shared by the workers holds the
epochs consumed; the worker that passes the budget stops the study and the other stops at its
next epoch.

Run with the benchmark venv (.venv-bench) from the repository root:
    .venv-bench/bin/python -m bench.hpo.peers.optuna_search --pruner sha --seed 0 --budget 20 \
        --storage postgresql+psycopg2:///optuna_hpo_x --out bench/hpo/results/optuna_tpe_sha-seed0.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path

import optuna

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

WORKERS = 2
SYSTEMS = {"sha": "optuna_tpe_sha", "hyperband": "optuna_tpe_hyperband"}


def make_pruner(name: str) -> optuna.pruners.BasePruner:
    if name == "sha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=1, reduction_factor=REDUCTION_FACTOR, min_early_stopping_rate=0
        )
    return optuna.pruners.HyperbandPruner(
        min_resource=1, max_resource=MAX_EPOCHS, reduction_factor=REDUCTION_FACTOR
    )


def suggest(trial: optuna.Trial) -> Hyperparameters:
    return Hyperparameters(
        learning_rate=trial.suggest_float("learning_rate", *LEARNING_RATE, log=True),
        weight_decay=trial.suggest_float("weight_decay", *WEIGHT_DECAY, log=True),
        width=trial.suggest_int("width", *WIDTH),
        depth=trial.suggest_int("depth", *DEPTH),
        dropout=trial.suggest_float("dropout", *DROPOUT),
        batch_size=trial.suggest_categorical("batch_size", list(BATCH_SIZES)),
    )


def worker(
    index: int,
    storage: str,
    study_name: str,
    pruner: str,
    seed: int,
    budget_epochs: int,
    consumed: Synchronized,
    reports_path: Path,
) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Each worker has its own sampler; seeded apart so the two do not draw the same first configs.
    sampler = optuna.samplers.TPESampler(seed=seed * WORKERS + index)
    study = optuna.load_study(
        study_name=study_name, storage=storage, sampler=sampler, pruner=make_pruner(pruner)
    )

    def objective(trial: optuna.Trial) -> float:
        training = Training(suggest(trial), seed=seed * 100_000 + trial.number)
        error = 1.0
        with reports_path.open("a") as reports:
            for _ in range(MAX_EPOCHS):
                training.train_epoch()
                error = training.validation_error()
                reports.write(json.dumps([str(trial.number), training.epochs, error, time.time()]) + "\n")
                reports.flush()
                with consumed.get_lock():
                    consumed.value += 1
                    spent = consumed.value
                if spent >= budget_epochs:
                    study.stop()
                    return error
                trial.report(error, training.epochs)
                if trial.should_prune():
                    raise optuna.TrialPruned()
        return error

    while consumed.value < budget_epochs:
        study.optimize(objective, n_trials=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pruner", choices=sorted(SYSTEMS), required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--budget", type=float, required=True)
    parser.add_argument("--storage", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    budget_epochs = epochs_for(args.budget, MAX_EPOCHS)
    name = f"hpo-{args.pruner}-seed{args.seed}"
    optuna.create_study(study_name=name, storage=args.storage, direction="minimize")
    consumed = multiprocessing.Value("i", 0)
    with tempfile.TemporaryDirectory(prefix="optuna-hpo-") as scratch:
        paths = [Path(scratch) / f"worker{i}.jsonl" for i in range(WORKERS)]
        processes = [
            multiprocessing.Process(
                target=worker,
                args=(i, args.storage, name, args.pruner, args.seed, budget_epochs, consumed, paths[i]),
            )
            for i in range(WORKERS)
        ]
        started = time.monotonic()
        started_at = time.time()
        for process in processes:
            process.start()
        for process in processes:
            process.join()
        wall = time.monotonic() - started
        reports = [
            EpochReport(trial=t, epoch=int(e), error=float(err), wall_time=float(w))
            for path in paths
            if path.exists()
            for t, e, err, w in (json.loads(line) for line in path.read_text().splitlines())
        ]
    if any(p.exitcode != 0 for p in processes):
        raise SystemExit(f"an Optuna worker failed: exit codes {[p.exitcode for p in processes]}")
    study = optuna.load_study(study_name=name, storage=args.storage)
    write_record(
        args.out,
        RunRecord(
            system=SYSTEMS[args.pruner],
            seed=args.seed,
            budget=args.budget,
            max_epochs=MAX_EPOCHS,
            wall_s=wall,
            trials=len(study.trials),
            ended_by=ENDED_BY_BUDGET if len(reports) >= budget_epochs else ENDED_BY_SEARCH,
            reports=reports,
            hparams={str(trial.number): plain_hparams(trial.params) for trial in study.trials},
            started_at=started_at,
            settings={
                "optuna": optuna.__version__,
                "sampler": "TPESampler(seed=2*seed+worker), defaults otherwise",
                "pruner": repr(make_pruner(args.pruner).__class__.__name__),
                "storage": "PostgreSQL, fresh database per run",
                "workers": WORKERS,
            },
        ),
    )


if __name__ == "__main__":
    main()
