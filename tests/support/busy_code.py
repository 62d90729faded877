"""Code that keeps one core busy with memory resident, run as a task (a trial's script, a command)
by the tests that read what the agent samples of it, and the experiment that runs it once."""

from __future__ import annotations

from pathlib import Path
from textwrap import indent

SINGLE_SEARCH = "searcher: {name: single, metric: x, max_length: {batches: 1}}\n"


def busy_code(seconds: float, resident_mib: int, *, trial: bool = False, profiler: bool = False) -> str:
    """Python that holds `resident_mib` MiB (touched, so resident) and spins for `seconds`. As a
    `trial`, it then reports one validation metric (x) through the Core API; with `profiler`,
    Determined's profiler is on while it spins (one sample a second, two a report)."""
    ballast = (
        "import time\n"
        f"ballast = bytearray({resident_mib} * 1024 * 1024)\n"
        "for i in range(0, len(ballast), 4096):\n"
        "    ballast[i] = 1\n"
    )
    spin = f"end = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"
    report = "core.train.report_validation_metrics(steps_completed=1, metrics={'x': 1.0})\n"
    if not trial and not profiler:
        return ballast + spin
    core = "import determined as det\nwith det.core.init() as core:\n"
    if profiler:
        on = "core.profiler.on(sampling_interval=1, samples_per_report=2)\n"
        body = on + spin + "core.profiler.off()\n"
        return ballast + core + indent(body + report, "    ")
    return ballast + spin + core + indent(report, "    ")


def busy_experiment(folder: Path, code: str) -> tuple[Path, Path]:
    """A single-trial experiment running `code` as busy.py: (its config, its context folder),
    written under `folder`."""
    context = folder / "busy-context"
    context.mkdir(parents=True)
    (context / "busy.py").write_text(code)
    config = folder / "busy.yaml"
    config.write_text("name: busy\nentrypoint: python3 busy.py\nmax_restarts: 0\n" + SINGLE_SEARCH)
    return config, context
