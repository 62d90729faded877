"""Runs the search-quality benchmark: each (system, seed) once, one JSON record each.

A record that already exists is kept, so an interrupted study resumes where it stopped; delete a
record to run it again. Systems run one after another, each with 2 workers on this machine.

    .venv/bin/python -m bench.hpo.run --systems all --seeds 0-9 --budget 16 --out bench/hpo/results/
    .venv/bin/python -m bench.hpo.report
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.hpo.cairn_search import SEARCHERS, run_cairn
from bench.hpo.peer_search import OPTUNA_PRUNERS, run_optuna, run_ray
from bench.hpo.record import RunRecord, record_path, write_record
from services.common.logging import configure_logging, get_logger

log = get_logger(__name__)
SYSTEMS = (*SEARCHERS, *OPTUNA_PRUNERS, "ray_asha")
DEFAULT_BUDGET = 16.0


def parse_seeds(text: str) -> list[int]:
    """'0-9' or '0,3,5' or '2'."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds += range(int(low), int(high or low) + 1)
    return seeds


def parse_systems(text: str) -> list[str]:
    if text == "all":
        return list(SYSTEMS)
    names = text.split(",")
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise SystemExit(f"--systems: unknown {', '.join(unknown)} (known: {', '.join(SYSTEMS)}, all)")
    return names


def run_one(
    system: str, seed: int, budget: float, out: Path, timeout_s: float, warm_starts: bool = True
) -> RunRecord:
    if system in SEARCHERS:
        record = run_cairn(system, seed, budget, timeout_s, warm_starts)
        write_record(out, record)
        return record
    if system in OPTUNA_PRUNERS:
        return run_optuna(system, seed, budget, out, timeout_s)
    return run_ray(seed, budget, out, timeout_s)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--systems", default="all", help=f"comma-separated, or all: {', '.join(SYSTEMS)}")
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="in full trainings")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    parser.add_argument(
        "--order",
        choices=("seed", "system"),
        default="seed",
        help="seed: every system for seed 0, then seed 1, ... (a partial study stays balanced)",
    )
    parser.add_argument(
        "--cold-starts",
        action="store_true",
        help="Cairn without warm starts (no preload_modules): each trial starts a new interpreter",
    )
    args = parser.parse_args()
    configure_logging("bench-hpo", "console", "INFO")
    systems, seeds = parse_systems(args.systems), parse_seeds(args.seeds)
    pairs = (
        [(system, seed) for seed in seeds for system in systems]
        if args.order == "seed"
        else [(system, seed) for system in systems for seed in seeds]
    )
    for system, seed in pairs:
        path = record_path(args.out, system, seed)
        if path.exists():
            log.info("already measured", system=system, seed=seed, path=str(path))
            continue
        started = time.monotonic()
        record = run_one(system, seed, args.budget, path, args.timeout, not args.cold_starts)
        log.info(
            "measured",
            system=system,
            seed=seed,
            epochs=len(record.reports),
            trials=record.trials,
            ended_by=record.ended_by,
            wall_s=round(time.monotonic() - started, 1),
        )


if __name__ == "__main__":
    main()
