"""What sampling system metrics costs the agent (issue 46), side by side with Determined's profiler.

Cairn's agent samples every running container in one pass over /proc
(services/agent/system_metrics/): here --containers process groups of three processes each (a shell
and two sleeps, started in sessions of their own, as the shim starts a command) are sampled
--samples times by the agent's own collector, and its thread's CPU time is divided by samples and
by containers. With no container running the collector reads nothing at all.

The reference is what Determined's Core API profiler does inside each trial that turns it on
(determined/core/_profiler.py, determined==0.38.1 in the task environment): each sample asks psutil
for the machine's CPU, memory, disk and network figures (its GPU group finds no NVML here). It is
timed in the task environment's interpreter, in the same way (CPU time over --samples samples).

    .venv/bin/python -m bench.system_metrics_cost [--containers 8 64] [--samples 200]

Only processes this bench starts are sampled; they are killed when it ends.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services.agent.slots import DeviceKind, SlotInfo
from services.agent.system_metrics.collector import SystemMetricsCollector, Target
from services.agent.system_metrics.gpus import GpuReadings
from services.agent.system_metrics.proc import Selector

REPO = Path(__file__).resolve().parents[1]
TASK_PYTHON = REPO / ".venv-task" / "bin" / "python"

DETERMINED_SAMPLES = """
import json, sys, time
from determined.core import _profiler as p
groups = [p._GPU(), p._CPU(), p._Memory(), p._Disk(), p._Network()]
samples = int(sys.argv[1])
for g in groups:
    g.sample_metrics()  # the first sample of each: psutil's own baselines
start = time.thread_time()
for _ in range(samples):
    for g in groups:
        g.sample_metrics()
print(json.dumps({"us_per_sample": (time.thread_time() - start) / samples * 1e6}))
"""


@contextmanager
def process_groups(count: int) -> Iterator[list[int]]:
    started = [
        subprocess.Popen(["sh", "-c", "sleep 600 & sleep 600 & wait"], start_new_session=True)
        for _ in range(count)
    ]
    try:
        time.sleep(0.5)  # the shells have started their sleeps
        yield [p.pid for p in started]
    finally:
        for p in started:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def cairn_cost(containers: int, samples: int) -> float:
    """CPU microseconds of one sample of `containers` containers, on the collector's thread."""
    with process_groups(containers) as groups:
        targets = [Target(f"c{i}", Selector("pgid", pgid)) for i, pgid in enumerate(groups)]
        collector = SystemMetricsCollector(
            interval_s=1.0,
            targets=lambda: targets,
            send=lambda _m: None,
            gpus=GpuReadings([SlotInfo("0", DeviceKind.CPU, "cpu", "u", 0, 0)]),
        )
        collector.sample()  # the first reading starts the counters
        start = time.thread_time()
        for _ in range(samples):
            found = collector.sample()
            assert len(found) == containers, (len(found), containers)
        return (time.thread_time() - start) / samples * 1e6


def determined_cost(samples: int) -> float | None:
    if not TASK_PYTHON.exists():
        return None
    done = subprocess.run(
        [str(TASK_PYTHON), "-c", DETERMINED_SAMPLES, str(samples)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1])["us_per_sample"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--containers", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
    print(f"{processes} processes on this machine before the bench's own", flush=True)
    for count in args.containers:
        total = cairn_cost(count, args.samples)
        print(
            f"cairn agent, {count} containers: {total:.0f} us a sample, {total / count:.0f} us a container",
            flush=True,
        )
    reference = determined_cost(args.samples)
    if reference is None:
        print("determined: no task environment (.venv-task) to time its profiler in")
    else:
        print(f"determined core.profiler, one trial: {reference:.0f} us a sample", flush=True)


if __name__ == "__main__":
    main()
