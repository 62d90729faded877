"""Turns the search-quality records into the README's table.

Per system, over its seeds: time to the target error (full trainings spent when the best-so-far
error first reached the target; a seed that never did counts as "more than the budget"), the best
error once the budget was spent, median and interquartile range of each, how many seeds reached the
target, and the ratio of Cairn random search's median time to target to the system's.

    .venv/bin/python -m bench.hpo.report [--results bench/hpo/results/] [--budget 20]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.hpo.accounting import (
    EpochReport,
    best_at_budget,
    best_so_far,
    consumed_budget,
    quantile,
    time_to_target,
)
from bench.hpo.budget import MAX_EPOCHS, NUM_RUNGS, REDUCTION_FACTOR
from bench.hpo.record import RunRecord, read_record

LABELS = {
    "cairn_asha_stop": "Cairn ASHA, stopping (`stop_once: true`)",
    "cairn_asha_promote": "Cairn ASHA, promotion (`stop_once: false`)",
    "cairn_random": "Cairn random search",
    "optuna_tpe_sha": "Optuna TPE + SuccessiveHalvingPruner",
    "optuna_tpe_hyperband": "Optuna TPE + HyperbandPruner",
    "ray_asha": "Ray Tune random + ASHAScheduler",
}
BASELINE = "cairn_random"


@dataclass(frozen=True)
class SystemSummary:
    system: str
    seeds: int
    # Per seed, in full trainings; inf where the target was not reached within the budget.
    times: list[float]
    # Per seed; runs that stopped short of the budget are left out.
    best_errors: list[float]
    wall_s: list[float]
    overrun: list[float]
    trials: list[int]

    @property
    def reached(self) -> int:
        return sum(1 for t in self.times if math.isfinite(t))


def summarize(system: str, records: Sequence[RunRecord], target: float, budget: float) -> SystemSummary:
    times, best, walls, trials, overrun = [], [], [], [], []
    rungs = [MAX_EPOCHS // REDUCTION_FACTOR ** (NUM_RUNGS - 1 - i) for i in range(NUM_RUNGS)]
    for record in records:
        curve = best_so_far(record.reports)
        reached = time_to_target(curve, target, record.max_epochs)
        times.append(reached if reached is not None and reached <= budget else math.inf)
        at_budget = best_at_budget(curve, budget, record.max_epochs)
        if at_budget is not None:
            best.append(at_budget)
        walls.append(record.wall_s)
        trials.append(record.trials)
        overrun.append(overrun_share(record, rungs))
        if consumed_budget(curve, record.max_epochs) < budget:
            spent = consumed_budget(curve, record.max_epochs)
            print(f"note: {system} seed {record.seed} spent only {spent:.2f}", file=sys.stderr)
    return SystemSummary(
        system=system,
        seeds=len(records),
        times=times,
        best_errors=best,
        wall_s=walls,
        overrun=overrun,
        trials=trials,
    )


def overrun_share(record: RunRecord, rungs: Sequence[int], workers: int = 2) -> float:
    """The share of a run's epochs that trials trained past the last rung they reached before they
    ended: the price of a stop decision that arrives after the next epoch began. The trials that
    were still training when the budget ran out (one per worker, the latest to report) are left out.
    """
    last: dict[str, EpochReport] = {}
    for report in record.reports:
        if report.trial not in last or report.epoch > last[report.trial].epoch:
            last[report.trial] = report
    cut = sorted(last.values(), key=lambda r: r.wall_time)[-workers:]
    over = 0
    for report in last.values():
        if report in cut:
            continue
        reached = max((r for r in rungs if r <= report.epoch), default=0)
        over += report.epoch - reached
    return over / len(record.reports) if record.reports else 0.0


def fmt_time(value: float, budget: float) -> str:
    return f"> {budget:g}" if not math.isfinite(value) else f"{value:.2f}"


def spread(values: list[float], budget: float) -> tuple[str, str]:
    """(median, 'p25–p75'), with unreached seeds as +inf."""
    if not values:
        return "–", "–"
    ordered = sorted(values)
    median = statistics.median(ordered)
    low, high = quantile(ordered, 0.25), quantile(ordered, 0.75)
    if any(math.isinf(v) for v in (low, high)):
        # Interpolating towards inf gives inf or nan; say what is known instead.
        low = ordered[math.floor(0.25 * (len(ordered) - 1))]
        high = ordered[math.ceil(0.75 * (len(ordered) - 1))]
    return fmt_time(median, budget), f"{fmt_time(low, budget)} – {fmt_time(high, budget)}"


def ratio(baseline: float, value: float, budget: float) -> str:
    """How many times sooner than random search; a lower bound where random did not reach."""
    if math.isinf(value) or value <= 0:
        return "–"
    if math.isinf(baseline):
        return f"> {budget / value:.1f}×"
    return f"{baseline / value:.1f}×"


def load(results: Path) -> dict[str, list[RunRecord]]:
    grouped: dict[str, list[RunRecord]] = defaultdict(list)
    for path in sorted(results.glob("*-seed*.json")):
        record = read_record(path)
        grouped[record.system].append(record)
    return grouped


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--reference", type=Path, default=None, help="default: <results>/reference.json")
    parser.add_argument("--budget", type=float, default=None, help="default: the records' budget")
    args = parser.parse_args()
    reference = json.loads((args.reference or args.results / "reference.json").read_text())
    target = float(reference["target_error"])
    grouped = load(args.results)
    if not grouped:
        raise SystemExit(f"no records in {args.results}")
    budget = args.budget or min(r.budget for records in grouped.values() for r in records)
    summaries = {
        system: summarize(system, grouped[system], target, budget) for system in LABELS if system in grouped
    }
    base = summaries.get(BASELINE)
    base_median = statistics.median(base.times) if base else math.nan
    print(
        f"target error {target} (reference: {reference['trainings']} random full trainings, "
        f"{reference['target_quantile']:.0%} quantile of their best errors); "
        f"budget {budget:g} full trainings\n"
    )
    print(
        "| system | seeds | reached target | time to target: median | IQR | vs random "
        f"| best error at {budget:g}: median | IQR | trials per run | epochs past a rung | wall per run |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for system, summary in summaries.items():
        t_med, t_iqr = spread(summary.times, budget)
        e_med = f"{statistics.median(summary.best_errors):.4f}" if summary.best_errors else "–"
        e_iqr = (
            f"{quantile(summary.best_errors, 0.25):.4f} – {quantile(summary.best_errors, 0.75):.4f}"
            if summary.best_errors
            else "–"
        )
        vs = ratio(base_median, statistics.median(summary.times), budget) if base else "–"
        print(
            f"| {LABELS[system]} | {summary.seeds} | {summary.reached}/{summary.seeds} | {t_med} | {t_iqr} "
            f"| {vs} | {e_med} | {e_iqr} | {statistics.median(summary.trials):g} "
            f"| {statistics.median(summary.overrun):.0%} "
            f"| {statistics.median(summary.wall_s):.0f} s |"
        )
    print_per_seed(summaries, grouped, budget)


def print_per_seed(
    summaries: dict[str, SystemSummary], grouped: dict[str, list[RunRecord]], budget: float
) -> None:
    seeds = sorted({r.seed for records in grouped.values() for r in records})
    print("\nTime to target per seed (full trainings):\n")
    print("| system | " + " | ".join(str(s) for s in seeds) + " |")
    print("|---|" + "---|" * len(seeds))
    for system, summary in summaries.items():
        by_seed = {r.seed: t for r, t in zip(grouped[system], summary.times, strict=True)}
        cells = [fmt_time(by_seed[s], budget) if s in by_seed else "" for s in seeds]
        print(f"| {system} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
