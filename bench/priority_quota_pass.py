"""The cost of a priority pool's quotas in the scheduler's decision function (quota_pass.py), beside
the plain priority pass on the same queue (in process, no master: the scheduler's own code on a
built state; the cluster of bench/fair_share_pass.py: every slot busy with one-slot trials of
--workspaces workspaces, --pending one-slot trials waiting).

Reported, median of --rounds:
- a whole-state decision (`schedule`): no quotas; every workspace with a maximum above what it
  holds (each waiting request asks its quota, none is held back); the same with every workspace
  held at its maximum (each waiting request is held back, naming its quota); one workspace below
  its guarantee (it reclaims --reclaim slots from the others in the pass);
- a session's pass after one change (a request added): a pool with quotas is decided whole (each
  request's quota is its own), against the plain priority pass's incremental one.

    .venv/bin/python -m bench.priority_quota_pass [--agents 1000] [--slots 8] [--pending 10000]
        [--workspaces 10] [--reclaim 100] [--rounds 3]
"""

from __future__ import annotations

from dataclasses import replace

from bench.fair_share_pass import build, cluster_arguments, median_s, one_change_pass, parsed
from services.scheduler.domain.model import ClusterState, SchedulerType, ShareGroup
from services.scheduler.domain.schedule import schedule


def with_quotas(state: ClusterState, groups: tuple[ShareGroup, ...]) -> ClusterState:
    pool = replace(state.pools[0], scheduler_type=SchedulerType.PRIORITY, workspaces=groups)
    return replace(state, pools=(pool,))


def main() -> None:
    parser = cluster_arguments(__doc__.split("\n\n")[0], rounds=3)
    parser.add_argument("--reclaim", type=int, default=100)
    args = parsed(parser)
    base = build(args.agents, args.slots, args.pending, args.workspaces, unequal=False)
    held = args.agents * args.slots // args.workspaces  # each workspace's running slots
    names = [f"w{i}" for i in range(args.workspaces)]
    cases = {
        "no quotas": with_quotas(base, ()),
        "maxima above holdings": with_quotas(base, tuple(ShareGroup(n, max_slots=2 * held) for n in names)),
        "every workspace at its maximum": with_quotas(
            base, tuple(ShareGroup(n, max_slots=held) for n in names)
        ),
        f"one workspace {args.reclaim} below its guarantee": with_quotas(
            base,
            (
                ShareGroup(names[0], guaranteed_slots=held + args.reclaim),
                *(ShareGroup(n, max_slots=2 * held) for n in names[1:]),
            ),
        ),
    }
    print(
        f"{args.agents} agents x {args.slots} slots, {len(base.requests)} requests ({args.pending} waiting)"
    )
    for label, state in cases.items():
        decision = schedule(state)
        what = f"{len(decision.assignments)} starts, {len(decision.preemptions)} preemptions"
        seconds = median_s(lambda s=state: schedule(s), args.rounds)
        print(f"whole decision, priority, {label}: {seconds:.3f} s ({what})")
    for label in ("no quotas", "maxima above holdings"):
        seconds, _ = one_change_pass(cases[label], args.rounds)
        print(f"session pass after one change, {label}: {seconds:.4f} s")


if __name__ == "__main__":
    main()
