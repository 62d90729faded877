"""The cost of scheduling passes at scale, in process: the master's domain driven by hand (the unit
tests' harness: a real SQLite database, the real scheduler's code behind the port, agents
registered as the agent stream registers them, no processes), so a cluster of 1,000 agents costs
nothing to stand up.

An experiment of --trials one-slot trials on --agents agents of --slots slots. The first passes
place what fits. Then two measurements:

- one whole-state pass (the scheduler's stateless Schedule call) timed in its two halves, the
  master building the request from the database and the scheduler deciding, medians of --rounds;
- turnover: --rounds times, --ending trials end (their containers report an exit, each in its own
  unit of work, as the agent stream delivers it) and one pass follows: p50/p95/max of its
  decision (the changes read, sent, decided on) and of the whole pass (with assigning the trials
  it starts), over a scheduler session (what the master uses) and over the whole-state call, on
  the same cluster;
- a pass after a switch: the same turnover, but before each pass the scheduler forgets its
  sessions, as a restarted scheduler (or another replica behind the same Service) would: the pass
  is answered "not applied", and the master sends the whole cluster as a new session's snapshot.

    .venv/bin/python -m bench.scheduling_pass [--trials 10000] [--agents 1000] [--slots 8]
        [--rounds 50] [--ending 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import select

from bench.grid_cluster import grid_cluster
from cairn.agent.v1 import agent_pb2 as apb
from services.common.logging import configure_logging
from services.master.domain.allocations import containers
from services.master.domain.scheduling import scheduling
from services.master.store import models
from tests.unit.master.domain.harness import Master


def _end_some(master: Master, count: int) -> None:
    with master.db.read() as s:
        ids = list(
            s.scalars(select(models.Container.id).where(models.Container.state == "ASSIGNED").limit(count))
        )
    for container_id in ids:
        change = apb.ContainerStateChanged(
            container_id=container_id, state=apb.CONTAINER_STATE_TERMINATED, exit_code=0
        )
        with master.ctx.unit_of_work() as w:
            containers.on_container_state(master.ctx, w, change)


def _turnover(
    master: Master, rounds: int, ending: int, switch: bool = False
) -> tuple[list[float], list[float]]:
    """Whole passes, and their decisions alone (the pass less assigning what it starts); with
    `switch`, each after the scheduler lost its sessions."""
    loop = master.scheduling
    applying: list[float] = []
    real_apply = loop._apply

    def timed_apply(decision: object) -> None:
        started = time.perf_counter()
        real_apply(decision)  # type: ignore[arg-type]
        applying.append(time.perf_counter() - started)

    loop._apply = timed_apply  # type: ignore[method-assign]
    passes, decisions = [], []
    for _ in range(rounds):
        _end_some(master, ending)
        if switch:
            master.ctx.scheduler.restart()  # type: ignore[attr-defined]
        applying.clear()
        started = time.perf_counter()
        loop.run_pass()
        passes.append(time.perf_counter() - started)
        decisions.append(passes[-1] - sum(applying))
    loop._apply = real_apply  # type: ignore[method-assign]
    return passes, decisions


def _summary(durations: list[float]) -> str:
    ordered = sorted(durations)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"p50 {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, "
        f"max {ordered[-1] * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--ending", type=int, default=4)
    args = parser.parse_args()
    configure_logging("bench", level="WARNING")
    with tempfile.TemporaryDirectory() as tmp:
        master = grid_cluster(Path(tmp) / "master", args.agents, args.slots, args.trials)
        master.settle()
        build: list[float] = []
        decide: list[float] = []
        for _ in range(5):
            started = time.perf_counter()
            request, _, _ = scheduling.build_request(master.ctx)
            built = time.perf_counter()
            master.ctx.scheduler.schedule(request)
            build.append(built - started)
            decide.append(time.perf_counter() - built)
        placed = sum(len(r.placements) > 0 for r in request.requests)
        print(
            f"{args.trials} allocations ({placed} placed) on {args.agents} agents of {args.slots} slots; "
            f"one whole-state pass: build {statistics.median(build) * 1000:.0f} ms, "
            f"decide {statistics.median(decide) * 1000:.0f} ms, request {request.ByteSize() / 1e6:.2f} MB"
        )
        few = max(3, args.rounds // 10)
        for name, rounds in (("session", args.rounds), ("after a switch", few), ("whole-state", few)):
            if name == "whole-state":
                master.scheduling.view = None
            passes, decisions = _turnover(master, rounds, args.ending, switch=name == "after a switch")
            print(
                f"{name} passes, {args.ending} trials ending before each: decision {_summary(decisions)}; "
                f"with starting the trials {_summary(passes)}"
            )
        master.close()


if __name__ == "__main__":
    main()
