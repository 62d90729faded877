"""The cost of a fair-share pass in the scheduler's decision function, beside the priority pass on
the same queue (in process, no master: the scheduler's own code on a built state).

--agents agents of --slots slots, all busy with one-slot trials of --workspaces workspaces (each
with a few users and jobs), and --pending one-slot trials waiting. Reported, median of --rounds, in
CPU time of this process (other work on a shared machine does not count):
- a whole-state decision (`schedule`), with the workspaces' weights equal (every one at its share:
  nothing to reclaim) and unequal (the heavier ones reclaim from the lighter);
- a session's pass after one change (a request added), the fair-share pool's against the priority
  pool's; and the fair-share pool's when the pool's settings change too, as the master sends them
  on most passes (every workspace's recent usage, the minimum run's protection time);
- how many requests each fair-share pass looked at one by one (the rest it labels by workspace,
  user and shape: services/scheduler/domain/fair_share.py).

    .venv/bin/python -m bench.fair_share_pass [--agents 1000] [--slots 8] [--pending 10000]
        [--workspaces 10] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

from services.scheduler.domain.model import (
    Agent,
    AllocationRequest,
    ClusterState,
    Placement,
    ResourcePool,
    SchedulerType,
    ShareGroup,
    Slot,
)
from services.scheduler.domain.schedule import schedule
from services.scheduler.domain.session import Changes, SchedulingSession


def build(agents: int, slots: int, pending: int, workspaces: int, unequal: bool) -> ClusterState:
    weights = tuple(ShareGroup(f"w{i}", weight=1 + (i % 3 if unequal else 0)) for i in range(workspaces))
    pool = ResourcePool("p", scheduler_type=SchedulerType.FAIR_SHARE, workspaces=weights)
    nodes = tuple(
        Agent(f"a{i}", "p", slots=tuple(Slot(str(s), allocation_id=f"r{i}-{s}") for s in range(slots)))
        for i in range(agents)
    )
    running = tuple(
        AllocationRequest(
            f"r{i}-{s}",
            "p",
            1,
            job_id=f"j{i % 50}",
            preemptible=True,
            workspace=f"w{i % workspaces}",
            user=f"w{i % workspaces}/u{i % 7}",
            placements=(Placement(f"a{i}", (str(s),)),),
            started_at_ns=i,
        )
        for i in range(agents)
        for s in range(slots)
    )
    waiting = tuple(
        AllocationRequest(
            f"q{k}",
            "p",
            1,
            job_id=f"j{k % 50}",
            preemptible=True,
            workspace=f"w{k % workspaces}",
            user=f"w{k % workspaces}/u{k % 7}",
            requested_at_ns=k,
        )
        for k in range(pending)
    )
    return ClusterState((pool,), nodes, running + waiting)


def median_s(action: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        gc.collect()  # what earlier rounds left is not this round's to collect
        started = time.process_time()
        action()
        times.append(time.process_time() - started)
    return statistics.median(times)


def one_change_pass(state: ClusterState, rounds: int, settings_move: bool = False) -> tuple[float, int]:
    """The median time of a session's pass after a request is added (and, with `settings_move`,
    the pool's usage and protection time change), and the most requests a pass looked at."""
    session = SchedulingSession(state)
    session.decide()
    times, examined = [], 0
    pool = state.pools[0]
    for n in range(rounds):
        added = AllocationRequest(f"new{n}", "p", 1, job_id="jx", workspace="w1", user="w1/u1")
        moved = None
        if settings_move:
            usage = tuple(replace(g, recent_slot_seconds=3600.0 + n) for g in pool.workspaces)
            moved = (replace(pool, workspaces=usage, protect_started_after_ns=n),)
        session.apply(Changes(pools=moved, requests=(added,)))
        gc.collect()  # what earlier rounds left is not this round's to collect
        started = time.process_time()
        session.decide()
        times.append(time.process_time() - started)
        examined = max(examined, session.work.examined)
    return statistics.median(times), examined


def cluster_arguments(description: str, rounds: int) -> argparse.ArgumentParser:
    """The options that size the built cluster (build()), shared by the pass benches."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--workspaces", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser


def parsed(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The arguments, the cluster's size bounded before anything is built."""
    args = parser.parse_args()
    if not (0 < args.agents <= 5000 and 0 < args.slots <= 64 and 0 <= args.pending <= 100_000):
        parser.error("--agents 1..5000, --slots 1..64, --pending 0..100000")
    if not 0 < args.workspaces <= 1000:
        parser.error("--workspaces 1..1000")
    return args


def main() -> None:
    args = parsed(cluster_arguments(__doc__.split("\n\n")[0], rounds=5))
    equal = build(args.agents, args.slots, args.pending, args.workspaces, unequal=False)
    unequal = build(args.agents, args.slots, args.pending, args.workspaces, unequal=True)
    priority = replace(equal, pools=(replace(equal.pools[0], scheduler_type=SchedulerType.PRIORITY),))
    requests = len(equal.requests)
    print(f"{args.agents} agents x {args.slots} slots, {requests} requests ({args.pending} waiting)")
    for label, state in (
        ("fair share, weights equal:  ", equal),
        ("fair share, weights unequal:", unequal),
        ("priority:                   ", priority),
    ):
        print(f"whole decision, {label} {median_s(lambda s=state: schedule(s), args.rounds):.3f} s")
    for label, state, settings_move in (
        ("fair share:                      ", equal, False),
        ("fair share, its settings moving: ", equal, True),
        ("priority:                        ", priority, False),
    ):
        seconds, examined = one_change_pass(state, args.rounds, settings_move)
        looked = f" ({examined} requests looked at one by one)" if state is equal else ""
        print(f"session pass after one change, {label} {seconds * 1000:.2f} ms{looked}")
    reclaims = SchedulingSession(unequal)
    decision = reclaims.decide()
    print(
        f"whole decision, fair share, weights unequal: {len(decision.preemptions)} reclaims, "
        f"{reclaims.work.examined} requests looked at one by one"
    )


if __name__ == "__main__":
    main()
