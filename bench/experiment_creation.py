"""What creating an experiment costs the master's CPU, in process (issue 45: every trial's life
under the master's one lock, its making included): the domain tests' harness master (a real
database, the real searcher's code behind its port), --agents agents of --slots slots, then
--experiments grid experiments of --trials one-slot trials each, created one after another as
`CreateExperiment` creates them (`experiments.creation.create`: the config parsed, checked and
expanded, the searcher's first answer, then one unit of work storing the experiment, its trials,
their tasks and allocation requests). Each creation is timed in this process's CPU time; the unit
of work's share is the part under the master's lock. Between creations the harness settles (the
pump delivers the searcher's events, passes place what fits), untimed.

    .venv/bin/python -m bench.experiment_creation [--experiments 20] [--trials 100]
        [--agents 10] [--slots 8] [--db-url postgresql:///NAME]

The last line is one summary: `experiment_creation: C ms an experiment of T trials, U ms of it
under the lock; P ms a trial`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services.common.heap import settle_after_startup
from services.common.logging import configure_logging
from services.master.domain.experiments import creation
from services.master.domain.kernel.context import Work
from tests.unit.master.domain.harness import Master, config_text

# Creations run first and left out of the figures: the first statements of each kind compile
# and cache what the later ones reuse.
WARM_UP = 3


class _LockedShare:
    """The CPU a creation spends in its units of work (under the master's lock): the context's
    unit_of_work, timed while the bench creates."""

    def __init__(self, master: Master) -> None:
        self.cpu = 0.0
        ctx = master.ctx
        real = ctx.unit_of_work

        @contextmanager
        def timed(*args: object, **kwargs: object) -> Iterator[Work]:
            started = time.process_time()
            try:
                with real(*args, **kwargs) as work:  # type: ignore[arg-type]
                    yield work
            finally:
                self.cpu += time.process_time() - started

        ctx.unit_of_work = timed  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--experiments", type=int, default=20)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--db-url", default=None, help="a database (default: SQLite in a temporary folder)")
    args = parser.parse_args()
    configure_logging("bench", level="WARNING")
    config = config_text(
        searcher={"name": "grid", "metric": "loss", "max_length": 1, "max_concurrent_trials": 0},
        hyperparameters={"x": {"type": "int", "minval": 0, "maxval": args.trials - 1, "count": args.trials}},
    )
    whole: list[float] = []
    locked: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        master = Master(Path(tmp) / "master", db_url=args.db_url)
        if master.scheduling.view is not None:
            master.scheduling.view.check = False  # the tests' comparison, not the master's work
        for i in range(args.agents):
            master.add_agent(f"agent-{i}", slots=args.slots)
        # The collector's policy the master process runs under (services/master/__main__.py).
        settle_after_startup()
        share = _LockedShare(master)
        real_create = creation.create

        def timed_create(*a: object, **k: object) -> creation.Created:
            share.cpu = 0.0
            started = time.process_time()
            created = real_create(*a, **k)  # type: ignore[arg-type]
            whole.append(time.process_time() - started)
            locked.append(share.cpu)
            return created

        creation.create = timed_create
        try:
            for _ in range(WARM_UP + args.experiments):
                master.create(config)
        finally:
            creation.create = real_create
        master.close()
    per_experiment = statistics.median(whole[WARM_UP:]) * 1000.0
    under_lock = statistics.median(locked[WARM_UP:]) * 1000.0
    database = "SQLite" if args.db_url is None else args.db_url.split(":", 1)[0]
    print(
        f"{args.experiments} grid experiments of {args.trials} trials ({database}), CPU ms, median: "
        f"{per_experiment:.2f} an experiment (p90 "
        f"{sorted(whole[WARM_UP:])[round(0.9 * (args.experiments - 1))] * 1000.0:.2f}), "
        f"{under_lock:.2f} of it in its units of work"
    )
    print(
        f"experiment_creation: {per_experiment:.2f} ms an experiment of {args.trials} trials, "
        f"{under_lock:.2f} ms of it under the lock; {per_experiment / args.trials:.3f} ms a trial"
    )


if __name__ == "__main__":
    main()
