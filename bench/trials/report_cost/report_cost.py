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
    end = time.perf_counter() + STEP_S
    while time.perf_counter() < end:
        pass


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def phase(core: cairn.core.Context, steps: int, start_step: int, report: bool) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one phase. The CPU time is read after a settling pause, so
    the shipper's sending of the phase's last reports counts in the phase that made them."""
    time.sleep(SETTLE_S)
    cpu0, wall0 = cpu_s(), time.perf_counter()
    for i in range(steps):
        busy_step()
        if report:
            step = start_step + i + 1
            core.train.report_training_metrics(step, {"loss": 1.0 / step, "accuracy": 0.5, "lr": 0.01})
            core.preempt.should_preempt()
    wall = time.perf_counter() - wall0
    time.sleep(SETTLE_S)
    return cpu_s() - cpu0, wall


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
                {"quiet_cpu": quiet[0], "quiet_wall": quiet[1], "report_cpu": loud[0], "report_wall": loud[1]}
            )
        core.train.report_validation_metrics(step, {"loss": 0.0})
    print("BENCH " + json.dumps({"steps": steps, "rounds": results}), flush=True)


if __name__ == "__main__":
    main()
