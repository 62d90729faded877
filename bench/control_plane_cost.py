"""What a trial costs the control plane's processes, end to end: the CPU the master, the agent and
the other services spend per trial on a real local cluster (one agent, 2 slots, SQLite), with
trials that make the search benchmark's Core API calls and train nothing
(trials/core_calls/core_calls_trial.py: one epoch each, random search, two at a time).

bench.trial_phases prices the master's domain work for a trial in process (~2.5 ms); this is the
whole of it: each trial's calls through the gRPC server, its interceptors and their transactions,
the agent stream's state changes and log lines, the searcher pump, the scheduling passes. Each
service's CPU, and its threads' context switches (each a wake-up on the cores the trials train
on), are read from /proc before the experiment is created and once it has ended.

    .venv/bin/python -m bench.control_plane_cost [--trials 150]

The last line is one summary: `control_plane_cost: master M ms, agent A ms, other services O ms a
trial (N trials in W s)`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bench.cairn_cluster import cairn_cluster
from bench.process_cpu import TICKS, command_line, kind_of, process_stat

HERE = Path(__file__).parent
MODEL_DIR = HERE / "trials" / "core_calls"
SLOTS = 2
SERVICES = ("master", "agent", "scheduler", "searcher", "checkpoint")


def _config(trials: int) -> str:
    return f"""
name: control-plane-cost
entrypoint: python3 core_calls_trial.py
hyperparameters:
  x: {{type: double, minval: 0.0, maxval: 1.0}}
searcher:
  name: random
  metric: validation_error
  smaller_is_better: true
  max_trials: {trials}
  max_length: {{epochs: 1}}
  max_concurrent_trials: {SLOTS}
max_restarts: 0
"""


_SWITCH_FIELDS = ("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")


def _context_switches(pid: str) -> int:
    """Voluntary and involuntary context switches of the process's threads (those still running:
    a thread that ended took its count with it)."""
    total = 0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in threads:
        try:
            lines = Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines()
        except OSError:
            continue  # the thread ended meanwhile
        total += sum(int(line.split()[1]) for line in lines if line.startswith(_SWITCH_FIELDS))
    return total


def service_usage(state_dir: Path) -> tuple[dict[str, float], dict[str, int]]:
    """CPU seconds (user + system) and context switches of each service of the cluster kept in
    `state_dir` (its services name it on their command lines)."""
    cpu = dict.fromkeys(SERVICES, 0.0)
    switches = dict.fromkeys(SERVICES, 0)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        argv = command_line(int(name))
        stat = process_stat(int(name))
        if stat is None or not any(str(state_dir) in arg for arg in argv):
            continue  # ended meanwhile, or not this cluster's
        service = kind_of(argv).removeprefix("services.")
        if service in cpu:
            _, _, user, system = stat
            cpu[service] += (user + system) / TICKS
            switches[service] += _context_switches(name)
    return cpu, switches


def run(trials: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="cairn-cpc-") as scratch:
        state_dir = Path(scratch) / "state"
        with cairn_cluster(state_dir, agents=1, slots=SLOTS) as api:
            time.sleep(2.0)  # past the services' start
            before, switches_before = service_usage(state_dir)
            started = time.monotonic()
            experiment_id = api.create(_config(trials), MODEL_DIR)
            outcome = api.wait_terminal(experiment_id, timeout=600, interval=0.5)
            wall = time.monotonic() - started
            after, switches_after = service_usage(state_dir)
    if outcome != "COMPLETED":
        raise SystemExit(f"the experiment ended {outcome}")
    per_trial = {name: (after[name] - before[name]) * 1000.0 / trials for name in SERVICES}
    switches = {
        f"{name}_switches": (switches_after[name] - switches_before[name]) / trials for name in SERVICES
    }
    return {**per_trial, **switches, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=150)
    args = parser.parse_args()
    result = run(args.trials)
    others = sum(result[name] for name in ("scheduler", "searcher", "checkpoint"))
    for name in SERVICES:
        print(
            f"  {name:10s} {result[name]:6.1f} ms, {result[name + '_switches']:6.0f} context switches a trial"
        )
    print(
        f"control_plane_cost: master {result['master']:.1f} ms, agent {result['agent']:.1f} ms, "
        f"other services {others:.1f} ms a trial ({args.trials} trials in {result['wall_s']:.1f} s)"
    )


if __name__ == "__main__":
    main()
