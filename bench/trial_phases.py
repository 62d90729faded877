"""What one trial costs the master's CPU, phase by phase (issue 45, "starts and ends cheap"), in
process: the master's domain driven by hand (the domain tests' harness: a real database, the real
scheduler's and searcher's code behind their ports, agents registered as the agent stream registers
them, no processes), so the figures are the master's own work, without sockets or other services.

A grid of --trials one-slot trials (max_length 1) on --agents agents of --slots slots fills the
cluster; then, --rounds times, --ending running trials go through their last phases and the next
pass places as many new ones. Each phase is timed in this process's CPU time and divided by the
trials it handled:

- place: the scheduling pass less starting what it placed (the changes read, sent, decided on);
- start: starting the placed trials (allocation states, container rows, task specs, start
  commands to the agents), as the pass does it;
- running: each trial's container reports RUNNING, as --senders agent streams deliver it at once
  (one: each change its own unit of work; more: readers on one event loop whose changes share
  units, as the stream's do);
- report: each trial's code reports its one validation metric (the intake of one batch, with
  the allocation's token);
- end: each container reports TERMINATED with exit code 0, delivered likewise (the allocation
  ends, the trial's searcher event is queued);
- searcher: the pump delivers the ended trials' events to the searcher and applies its answers
  (the trials complete, the grid's next ones are asked for).

    .venv/bin/python -m bench.trial_phases [--agents 100] [--slots 8] [--trials 4000]
        [--rounds 20] [--ending 40] [--senders 1] [--db-url postgresql:///NAME]

The last line is one summary: `trial_phases: place P ms, start S ms, running R ms, report M ms,
end E ms, searcher Q ms, total T ms a trial`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from sqlalchemy import select

from bench.grid_cluster import grid_cluster
from cairn.agent.v1 import agent_pb2 as apb
from services.common.heap import settle_after_startup
from services.common.logging import configure_logging
from services.common.principal import Principal
from services.master.domain import wiring
from services.master.domain.allocations import containers
from services.master.domain.kernel.batched_units import BatchedUnits
from services.master.domain.metrics import intake
from services.master.domain.metrics.reports import Report
from services.master.store import models
from tests.unit.master.domain.harness import Master

PHASES = ("place", "start", "running", "report", "end", "searcher")


def _cpu(fn: Callable[[], object]) -> float:
    started = time.process_time()
    fn()
    return time.process_time() - started


def _state_change(
    master: Master, container_id: str, state: apb.ContainerState.ValueType, exit_code: int | None = None
) -> None:
    change = apb.ContainerStateChanged(container_id=container_id, state=state)
    if exit_code is not None:
        change.exit_code = exit_code
    with master.ctx.unit_of_work() as w:
        containers.on_container_state(master.ctx, w, change)


class _Senders:
    """State changes as `count` agents' streams deliver them: each sender a reader on one event
    loop that applies its changes one after another through the stream's shared units of work
    (BatchedUnits.run_async, as the agent stream's readers do), all senders at once. One sender is
    one unit of work a change."""

    def __init__(self, master: Master, count: int) -> None:
        self.master = master
        self.count = count
        self.units = BatchedUnits(master.ctx, prepare=wiring.preload_agent_reports)
        # Where the batches are applied (the stream's apply threads).
        self.pool = ThreadPoolExecutor(4) if count > 1 else None

    def deliver(self, state: apb.ContainerState.ValueType, container_ids: list[str]) -> None:
        exit_code = 0 if state == apb.CONTAINER_STATE_TERMINATED else None
        pool = self.pool
        if pool is None:
            for container_id in container_ids:
                _state_change(self.master, container_id, state, exit_code)
            return

        async def send(mine: list[str]) -> None:
            for container_id in mine:
                change = apb.ContainerStateChanged(container_id=container_id, state=state)
                if exit_code is not None:
                    change.exit_code = exit_code
                await self.units.run_async(
                    partial(containers.on_container_state, self.master.ctx, message=change),
                    pool,
                    key=containers.ReportKey(container_id, ends=exit_code is not None),
                )

        async def all_senders() -> None:
            shares = [container_ids[i :: self.count] for i in range(self.count)]
            await asyncio.gather(*(send(share) for share in shares if share))

        asyncio.run(all_senders())


def _assigned(master: Master) -> list[str]:
    with master.db.read() as s:
        return list(s.scalars(select(models.Container.id).where(models.Container.state == "ASSIGNED")))


def _running(master: Master, count: int) -> list[tuple[str, int, str]]:
    """(container, trial, allocation) of `count` running trials."""
    with master.db.read() as s:
        rows = s.execute(
            select(models.Container.id, models.Allocation.trial_id, models.Allocation.id)
            .join(models.Allocation, models.Allocation.id == models.Container.allocation_id)
            .where(models.Container.state == "RUNNING")
            .order_by(models.Container.id)
            .limit(count)
        )
        return [(c, t, a) for c, t, a in rows if t is not None]


class _TimedPass:
    """The scheduling pass split in two: its decision, and starting what it placed (`_apply`)."""

    def __init__(self, master: Master) -> None:
        self.loop = master.scheduling
        self.applying = 0.0
        real_apply = self.loop._apply

        def timed_apply(decision: object) -> None:
            started = time.process_time()
            real_apply(decision)  # type: ignore[arg-type]
            self.applying += time.process_time() - started

        self.loop._apply = timed_apply  # type: ignore[method-assign]

    def run(self) -> tuple[float, float]:
        """(decision, start) CPU seconds of one pass."""
        self.applying = 0.0
        whole = _cpu(self.loop.run_pass)
        return whole - self.applying, self.applying


def _round(
    master: Master, timed: _TimedPass, senders: _Senders, ending_count: int
) -> dict[str, float] | None:
    """One round: `ending_count` running trials report, end and are heard by the searcher; a pass
    places as many new ones, which report RUNNING. CPU milliseconds a trial, by phase (None: no
    trial was left to end or to start)."""
    ending = _running(master, ending_count)
    if not ending:
        return None

    def report_each() -> None:
        for _, trial, allocation_id in ending:
            # As the trial's own code reports: with its allocation's token.
            batch = [Report("validation", 1, {"loss": 0.5}, seq=1)]
            intake.report(master.ctx, Principal(allocation_id=allocation_id), trial, 1, batch)

    def end_each() -> None:
        senders.deliver(apb.CONTAINER_STATE_TERMINATED, [container_id for container_id, _, _ in ending])

    report = _cpu(report_each)
    end = _cpu(end_each)
    searcher = _cpu(master.pump.deliver_all)
    place, start = timed.run()
    started = _assigned(master)
    if not started:
        return None

    def running_each() -> None:
        senders.deliver(apb.CONTAINER_STATE_RUNNING, started)

    running = _cpu(running_each)
    n, m = len(ending), len(started)
    return {
        "place": place / m * 1000.0,
        "start": start / m * 1000.0,
        "running": running / m * 1000.0,
        "report": report / n * 1000.0,
        "end": end / n * 1000.0,
        "searcher": searcher / n * 1000.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--trials", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--ending", type=int, default=40)
    parser.add_argument(
        "--senders",
        type=int,
        default=1,
        help="agents' streams delivering the running and end phases' state changes at once, through "
        "the stream's shared units of work (1: one unit of work a change)",
    )
    parser.add_argument("--db-url", default=None, help="a database (default: SQLite in a temporary folder)")
    args = parser.parse_args()
    configure_logging("bench", level="WARNING")
    # The collector's policy the master process runs under (services/master/__main__.py), set at
    # the same point: after the imports, before any experiment exists.
    settle_after_startup()
    per_trial: dict[str, list[float]] = {phase: [] for phase in PHASES}
    with tempfile.TemporaryDirectory() as tmp:
        master = grid_cluster(Path(tmp) / "master", args.agents, args.slots, args.trials, args.db_url)
        for container_id in _assigned(master):
            _state_change(master, container_id, apb.CONTAINER_STATE_RUNNING)
        timed = _TimedPass(master)
        senders = _Senders(master, args.senders)
        for _ in range(args.rounds):
            measured = _round(master, timed, senders, args.ending)
            if measured is None:
                break
            for phase, ms in measured.items():
                per_trial[phase].append(ms)
        if senders.pool is not None:
            senders.pool.shutdown()
        master.close()
    medians = {phase: statistics.median(v) if v else float("nan") for phase, v in per_trial.items()}
    rounds = len(per_trial["place"])
    print(
        f"{args.agents} agents x {args.slots} slots, {args.trials} trials, {rounds} rounds of {args.ending} "
        f"ending ({'SQLite' if args.db_url is None else args.db_url.split(':', 1)[0]}), "
        f"{args.senders} sender(s); "
        "CPU ms a trial, median of the rounds (p90):"
    )
    if senders.pool is not None:
        stats = senders.units.stats
        print(f"  {stats.items} reports applied in {stats.batches} units of work ({stats.split} split)")
    for phase in PHASES:
        values = sorted(per_trial[phase])
        p90 = values[min(len(values) - 1, round(0.9 * (len(values) - 1)))] if values else float("nan")
        print(f"  {phase:9s} {medians[phase]:6.2f} ({p90:.2f})")
    print(
        "trial_phases: "
        + ", ".join(f"{phase} {medians[phase]:.2f} ms" for phase in PHASES)
        + f", total {sum(medians.values()):.2f} ms a trial"
    )


if __name__ == "__main__":
    main()
