"""What each run of the search benchmark trained, in CPU seconds: its walls compared on its work.

The systems draw different configurations (their random streams differ) and ASHA keeps training
the ones that do well, so two runs of the same budget (the same number of epochs) need not be the
same amount of work: an epoch at batch size 32 and width 250 costs several times one at 256 and 20.
This prices every configuration the given records trained, each alone on one thread of this
machine (one epoch and its validation, as every system's trial measures after each epoch; the
median of a few, after one epoch not counted, so the price leaves out a process's first-epoch
warm-up, which is the system's cost, not the configuration's), and adds up each run's reports.

    to budget       seconds from the run's start to the report that spent the budget (the wall
                    ends where the runner noticed, which for Cairn's poll is a few epochs later)
    training work   the budget's epochs, each at its configuration's price (CPU seconds)
    share           training work / (2 workers x time to budget): how much of the two cores went
                    to training
    time per work   seconds to budget per CPU second of training: lower is better, whatever was
                    drawn

Records written before they kept their start (2026-12-04) are measured by their wall and all
their epochs instead.

Every configuration is priced in one process, in an order shuffled across records, so a drift of
the machine's speed spreads over all systems alike. Records written before they kept their trials'
hyperparameters (2026-12-04) cannot be priced; rerun them.

    PYTHONPATH=$PWD/.venv-task/lib/python3.11/site-packages .venv/bin/python -m bench.hpo.price \\
        /tmp/hpo/cairn_asha_promote-seed0.json /tmp/hpo/ray_asha-seed0.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.hpo.accounting import EpochReport
from bench.hpo.record import RunRecord, read_record

# Every system runs two trials at once on this benchmark's two cores.
WORKERS = 2
MEASURED_EPOCHS = 3


def config_key(values: Mapping[str, Any]) -> str:
    return json.dumps(dict(values), sort_keys=True)


@dataclass(frozen=True)
class PricedRun:
    system: str
    seed: int
    wall_s: float
    # To the budget's last epoch where the record knows its start; else the wall.
    elapsed_s: float
    epochs: int
    trials: int
    work_s: float

    @property
    def share(self) -> float:
        return self.work_s / (WORKERS * self.elapsed_s)

    @property
    def time_per_work(self) -> float:
        return self.elapsed_s / self.work_s


def counted(record: RunRecord) -> list[EpochReport]:
    """The reports a run is priced by: up to the one that spent the budget where the record knows
    its start (the time it is measured to), else all of them (with its wall)."""
    return record.budget_reports() if record.budget_s is not None else record.reports


def configurations(records: Iterable[RunRecord]) -> dict[str, dict[str, Any]]:
    """Every distinct configuration the records' counted reports trained, by key. A report whose
    trial has no hyperparameters in its record is an error: the run cannot be priced."""
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        for report in counted(record):
            values = record.hparams.get(report.trial)
            if values is None:
                raise SystemExit(
                    f"{record.system} seed {record.seed}: trial {report.trial} has no hyperparameters "
                    "in its record (written before records kept them?); run it again"
                )
            found.setdefault(config_key(values), values)
    return found


def priced(record: RunRecord, prices: Mapping[str, float]) -> PricedRun:
    to_budget = record.budget_s
    reports = counted(record)
    work = sum(prices[config_key(record.hparams[report.trial])] for report in reports)
    return PricedRun(
        system=record.system,
        seed=record.seed,
        wall_s=record.wall_s,
        elapsed_s=to_budget if to_budget is not None else record.wall_s,
        epochs=len(reports),
        trials=len({report.trial for report in reports}),
        work_s=work,
    )


def epoch_price(values: Mapping[str, Any], epochs: int = MEASURED_EPOCHS) -> float:
    """CPU seconds of one epoch and its validation for this configuration, on this thread."""
    from bench.hpo.task import Hyperparameters, Training  # torch: only when measuring

    training = Training(Hyperparameters.from_mapping(dict(values)), seed=0)
    training.train_epoch()
    training.validation_error()
    costs = []
    for _ in range(epochs):
        started = time.thread_time()
        training.train_epoch()
        training.validation_error()
        costs.append(time.thread_time() - started)
    return statistics.median(costs)


def measure_prices(
    configs: Mapping[str, Mapping[str, Any]], price: Callable[[Mapping[str, Any]], float] = epoch_price
) -> dict[str, float]:
    keys = sorted(configs)
    random.Random(0).shuffle(keys)
    return {key: price(configs[key]) for key in keys}


def table(runs: Sequence[PricedRun]) -> str:
    lines = [
        "| system | seed | wall | to budget | epochs | trials | training work | share of 2 cores "
        "| time per work |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run.system} | {run.seed} | {run.wall_s:.1f} s | {run.elapsed_s:.1f} s | {run.epochs} "
            f"| {run.trials} | {run.work_s:.1f} CPU-s | {100 * run.share:.0f} % "
            f"| {run.time_per_work:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("records", type=Path, nargs="+", help="records written by bench.hpo.run")
    args = parser.parse_args()
    records = [read_record(path) for path in args.records]
    configs = configurations(records)
    started = time.monotonic()
    prices = measure_prices(configs)
    print(table([priced(record, prices) for record in records]))
    print(f"\n{len(configs)} configurations priced in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
