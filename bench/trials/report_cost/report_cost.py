"""Trial code for bench.core_api_cost: a loop of 1 ms CPU steps, run in alternating phases without
and with Core API reporting (report_training_metrics and should_preempt every step), measuring the
process's CPU time (every thread: the shipper's sending counts too) and wall time per phase."""

from __future__ import annotations

import json
import os
import resource
import time

import cairn.core

STEP_S = 0.001
SETTLE_S = 0.5


def busy_step() -> None:
    # 1 ms of this thread's CPU, not of the clock: a step the scheduler interrupts (other
    # processes on the machine) still costs the same CPU, so the phases differ only by reporting.
    end = time.thread_time() + STEP_S
    while time.thread_time() < end:
        pass


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def phase(core: cairn.core.Context, steps: int, start_step: int, report: bool) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, the training thread's own CPU seconds) of one phase. The CPU
    time is read after a settling pause, so the shipper's sending of the phase's last reports
    counts in the phase that made them."""
    time.sleep(SETTLE_S)
    cpu0, wall0, own0 = cpu_s(), time.perf_counter(), time.thread_time()
    for i in range(steps):
        busy_step()
        if report:
            step = start_step + i + 1
            core.train.report_training_metrics(step, {"loss": 1.0 / step, "accuracy": 0.5, "lr": 0.01})
            core.preempt.should_preempt()
    wall = time.perf_counter() - wall0
    own = time.thread_time() - own0
    time.sleep(SETTLE_S)
    return cpu_s() - cpu0, wall, own


def main() -> None:
    steps = int(os.environ.get("BENCH_STEPS", "2000"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "5"))
    results = []
    mode = cairn.core.TensorboardMode(os.environ.get("BENCH_TENSORBOARD", "AUTO"))
    with cairn.core.init(tensorboard_mode=mode) as core:
        step = 0
        for _ in range(rounds):
            quiet = phase(core, steps, step, report=False)
            loud = phase(core, steps, step, report=True)
            step += steps
            results.append(
                {
                    "quiet_cpu": quiet[0],
                    "quiet_wall": quiet[1],
                    "quiet_own": quiet[2],
                    "report_cpu": loud[0],
                    "report_wall": loud[1],
                    "report_own": loud[2],
                }
            )
        core.train.report_validation_metrics(step, {"loss": 0.0})
    print("BENCH " + json.dumps({"steps": steps, "rounds": results}), flush=True)


if __name__ == "__main__":
    main()
