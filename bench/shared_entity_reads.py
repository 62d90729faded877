"""Reads of many rows that share one experiment, over the domain tests' harness (a real SQLite
database, the master's own code): an experiment of --trials grid trials, all pending, whose config
lists --trials grid values (as a categorical grid's does), then the reads that take many of its
rows at once, each timed in this process's CPU:

- the job queue (`det job list`): every live allocation of the experiment;
- runs' rows (the runs table and its API): a page of --page runs;
- a pass's starts' preload (placement.preload): what --page starts read of their trials,
  experiment, owner and workspace.

A read that joins the experiment to each row decodes its config once a row; these read it once.

    .venv/bin/python -m bench.shared_entity_reads [--trials 3000] [--page 100] [--rounds 3]

The last line: `shared_entity_reads: job queue J ms, runs' rows R ms, starts' preload P ms`
(medians of the rounds).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select

from services.common.logging import configure_logging
from services.master.domain.allocations import placement
from services.master.domain.reads.jobs import queued_jobs
from services.master.domain.reads.runs import run_rows
from services.master.store import models
from tests.unit.master.domain.harness import Master


def _cpu_ms(fn: Callable[[], object]) -> float:
    started = time.process_time()
    fn()
    return (time.process_time() - started) * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=3000)
    parser.add_argument("--page", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    configure_logging("bench", level="WARNING")
    with tempfile.TemporaryDirectory(prefix="cairn-shared-reads-") as tmp:
        master = Master(Path(tmp) / "master")
        master.create(
            searcher={
                "name": "grid",
                "metric": "loss",
                "max_length": {"batches": 1},
                "max_concurrent_trials": 0,
            },
            hyperparameters={"x": {"type": "categorical", "vals": list(range(args.trials))}},
        )
        master.pump.deliver_all()
        db = master.ctx.db
        with db.read() as s:
            trial_ids = list(s.scalars(select(models.Trial.id).order_by(models.Trial.id).limit(args.page)))
            allocations = list(
                s.scalars(select(models.Allocation).where(models.Allocation.trial_id.in_(trial_ids)))
            )

        def jobs() -> None:
            with db.read() as s:
                queued_jobs(s)

        def runs() -> None:
            with db.read() as s:
                run_rows(s, trial_ids)

        def preload() -> None:
            with master.ctx.unit_of_work() as w:
                placement.preload(w, [w.session.merge(a, load=False) for a in allocations], [])
                w.session.rollback()

        figures: dict[str, list[float]] = {"job queue": [], "runs' rows": [], "starts' preload": []}
        for _ in range(args.rounds):
            figures["job queue"].append(_cpu_ms(jobs))
            figures["runs' rows"].append(_cpu_ms(runs))
            figures["starts' preload"].append(_cpu_ms(preload))
        master.close()
    print(
        f"{args.trials} pending trials of one experiment, pages of {args.page}, {args.rounds} rounds: "
        + "; ".join(
            f"{name} " + ", ".join(f"{v:.1f}" for v in values) + " ms" for name, values in figures.items()
        )
    )
    print(
        "shared_entity_reads: "
        + ", ".join(f"{name} {statistics.median(values):.1f} ms" for name, values in figures.items()),
        flush=True,
    )


if __name__ == "__main__":
    main()
