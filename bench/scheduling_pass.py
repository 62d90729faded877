"""The cost of one scheduling pass at scale, in process: the master's domain driven by hand (the
unit tests' harness: a real SQLite database, the real scheduler's decision function, agents
registered as the agent stream registers them, no processes), so a cluster of 1,000 agents costs
nothing to stand up.

An experiment of --trials one-slot trials on --agents agents of --slots slots: the first passes
place what fits, then one pass is timed in its two halves, the master building the request from
the database and the scheduler deciding, medians of --rounds.

    .venv/bin/python -m bench.scheduling_pass [--trials 10000] [--agents 1000] [--slots 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from services.common.logging import configure_logging
from services.master.domain import scheduling
from tests.unit.master.domain.harness import Master, config_text


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    configure_logging("bench", level="WARNING")
    with tempfile.TemporaryDirectory() as tmp:
        master = Master(Path(tmp) / "master")
        for i in range(args.agents):
            master.add_agent(f"agent-{i}", slots=args.slots)
        master.create(
            config_text(
                searcher={"name": "grid", "metric": "loss", "max_length": 1, "max_concurrent_trials": 0},
                hyperparameters={
                    "x": {"type": "int", "minval": 0, "maxval": args.trials - 1, "count": args.trials}
                },
            )
        )
        master.settle()
        build: list[float] = []
        decide: list[float] = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            request, _, _ = scheduling.build_request(master.ctx)
            built = time.perf_counter()
            master.ctx.scheduler.schedule(request)
            build.append(built - started)
            decide.append(time.perf_counter() - built)
        placed = sum(len(r.placements) > 0 for r in request.requests)
        master.close()
    print(
        f"{args.trials} allocations ({placed} placed) on {args.agents} agents of {args.slots} slots: "
        f"build {statistics.median(build) * 1000:.0f} ms, decide {statistics.median(decide) * 1000:.0f} ms, "
        f"request {request.ByteSize() / 1e6:.2f} MB"
    )


if __name__ == "__main__":
    main()
