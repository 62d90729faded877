"""Replays search policies over learning curves the benchmark measured, for many more seeds than
the real runs can afford.

Ten real runs per system leave medians with wide error bars: whether a good configuration is drawn
early decides most of a run. Here every full (MAX_EPOCHS) learning curve in the result records is
pooled, and each policy is replayed on draws from that pool for hundreds of seeds, on two workers
that each train one epoch per step. Only the policy differs between rows: the same curves, the same
draws for the same seed, the same accounting (epochs until the best error so far reaches the
target). It is a model of the real runs (no timing, no startup costs), not a replacement for them.

Policies: random search; stopping ASHA with Determined's rule (continue while ranked in the top
max(1, floor(n / divisor)) of the rung, the new result included: Cairn's `stop_once: true`) and with
Ray Tune's (continue while at or better than the 1/divisor quantile of the results already there);
promotion ASHA (Cairn's `stop_once: false`: a free worker promotes the best unpromoted trial in the
top floor(n / divisor) of the highest rung that has one, else starts a new trial).

    .venv/bin/python -m bench.hpo.replay [--seeds 400] [--results bench/hpo/results/]
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.hpo.budget import MAX_EPOCHS, NUM_RUNGS, REDUCTION_FACTOR
from bench.hpo.report import BASELINE, load

RUNGS = [MAX_EPOCHS // REDUCTION_FACTOR ** (NUM_RUNGS - 1 - i) for i in range(NUM_RUNGS)]
WORKERS = 2
Curve = list[float]


def full_curves(results: Path) -> list[Curve]:
    """Every trial's validation errors for epochs 1..MAX_EPOCHS, from runs that trained trials in
    full (random search trains every trial to the end)."""
    curves: list[Curve] = []
    for record in load(results).get(BASELINE, []):
        by_trial: dict[str, dict[int, float]] = {}
        for report in record.reports:
            by_trial.setdefault(report.trial, {})[report.epoch] = report.error
        for errors in by_trial.values():
            if len(errors) == MAX_EPOCHS:
                curves.append([errors[e] for e in range(1, MAX_EPOCHS + 1)])
    return curves


@dataclass
class Trial:
    key: int
    curve: Curve
    epochs: int = 0
    target: int = RUNGS[0]


@dataclass
class Replay:
    """One seed of one policy: the epochs spent and the best error seen."""

    curves: list[Curve]
    rng: random.Random
    target_error: float
    budget_epochs: int
    spent: int = 0
    best: float = math.inf
    reached_at: float | None = None
    created: int = 0
    rungs: dict[int, list[tuple[float, int]]] = field(default_factory=lambda: {r: [] for r in RUNGS[:-1]})

    def new_trial(self) -> Trial:
        self.created += 1
        return Trial(self.created, self.rng.choice(self.curves))

    def train_epoch(self, trial: Trial) -> None:
        error = trial.curve[trial.epochs]
        trial.epochs += 1
        self.spent += 1
        self.best = min(self.best, error)
        if self.reached_at is None and self.best <= self.target_error:
            self.reached_at = self.spent / MAX_EPOCHS

    @property
    def over(self) -> bool:
        return self.reached_at is not None or self.spent >= self.budget_epochs


def _determined_continues(results: list[tuple[float, int]], error: float) -> bool:
    ranked = sorted(e for e, _ in results)
    rank = bisect.bisect_left(ranked, error)
    return rank < max(1, int(len(ranked) / REDUCTION_FACTOR))


def _ray_continues(previous: list[float], error: float) -> bool:
    if not previous:
        return True
    ordered = sorted(previous)
    # numpy's default (linear) percentile at 100/divisor, computed by hand.
    position = (len(ordered) - 1) / REDUCTION_FACTOR
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    cutoff = ordered[low] + (ordered[high] - ordered[low]) * (position - low)
    return error <= cutoff


def _drive(replay: Replay, next_job: Callable[[], Trial], done_with: Callable[[Trial], bool]) -> None:
    """The workers train an epoch each in turn until the budget is spent; a worker whose trial
    `done_with` releases (stopped, finished, or paused at a rung) takes `next_job()`."""
    workers = [next_job() for _ in range(WORKERS)]
    while not replay.over:
        for index, trial in enumerate(workers):
            replay.train_epoch(trial)
            if replay.over:
                return
            if done_with(trial):
                workers[index] = next_job()


def replay_stopping(replay: Replay, rule: str) -> None:
    def done_with(trial: Trial) -> bool:
        error, epoch = trial.curve[trial.epochs - 1], trial.epochs
        if epoch == MAX_EPOCHS:
            return True
        if epoch not in replay.rungs:
            return False
        rung = replay.rungs[epoch]
        if rule == "determined":
            rung.append((error, trial.key))
            return not _determined_continues(rung, error)
        goes_on = _ray_continues([e for e, _ in rung], error)
        rung.append((error, trial.key))
        return not goes_on

    _drive(replay, replay.new_trial, done_with)


def replay_promotion(replay: Replay) -> None:
    idle: dict[int, Trial] = {}
    # (rung length, trial) pairs already sent on from that rung.
    promoted: set[tuple[int, int]] = set()

    def next_job() -> Trial:
        for rung_index in range(len(RUNGS) - 2, -1, -1):
            length = RUNGS[rung_index]
            ranked = sorted(replay.rungs[length])
            for _error, key in ranked[: int(len(ranked) / REDUCTION_FACTOR)]:
                if (length, key) not in promoted and key in idle:
                    promoted.add((length, key))
                    trial = idle.pop(key)
                    trial.target = RUNGS[rung_index + 1]
                    return trial
        return replay.new_trial()

    def done_with(trial: Trial) -> bool:
        if trial.epochs < trial.target:
            return False
        if trial.epochs < MAX_EPOCHS:
            replay.rungs[trial.epochs].append((trial.curve[trial.epochs - 1], trial.key))
            idle[trial.key] = trial
        return True

    _drive(replay, next_job, done_with)


def replay_random(replay: Replay) -> None:
    _drive(replay, replay.new_trial, lambda trial: trial.epochs == MAX_EPOCHS)


Policy = Callable[[Replay], None]
POLICIES: dict[str, Policy] = {
    "random search": replay_random,
    "stopping ASHA, Determined's rule (Cairn stop_once: true)": lambda r: replay_stopping(r, "determined"),
    "stopping ASHA, Ray Tune's rule": lambda r: replay_stopping(r, "ray"),
    "promotion ASHA (Cairn stop_once: false)": replay_promotion,
}


def _fmt(value: float) -> str:
    return f"{value:.2f}" if math.isfinite(value) else "> budget"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--seeds", type=int, default=400)
    parser.add_argument("--budget", type=float, default=16.0)
    args = parser.parse_args()
    reference = json.loads((args.results / "reference.json").read_text())
    target = float(reference["target_error"])
    curves = full_curves(args.results)
    budget_epochs = int(args.budget * MAX_EPOCHS)
    print(
        f"{len(curves)} full learning curves (Cairn random search records), {args.seeds} seeds per policy, "
        f"target {target}, budget {args.budget:g} full trainings\n"
    )
    print("| policy | reached target | time to target: median | IQR | vs random |")
    print("|---|---|---|---|---|")
    baseline: float | None = None
    for name, policy in POLICIES.items():
        times = []
        for seed in range(args.seeds):
            replay = Replay(curves, random.Random(seed), target, budget_epochs)
            policy(replay)
            times.append(replay.reached_at if replay.reached_at is not None else math.inf)
        median = statistics.median(times)
        baseline = median if baseline is None else baseline
        ordered = sorted(times)
        q1, q3 = ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]
        reached = sum(1 for t in times if math.isfinite(t))
        print(
            f"| {name} | {reached / len(times):.0%} | {_fmt(median)} | {_fmt(q1)} – {_fmt(q3)} | "
            f"{baseline / median:.1f}× |"
        )


if __name__ == "__main__":
    main()
