"""The scheduler pass benches and the control plane's cost per trial run to the end on a small
cluster (their figures are bench/README.md's; here only that each still runs against the code it
measures: a bench that breaks unnoticed measures nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _run_bench(bench: str, *arguments: str) -> str:
    """The bench's output, once it ran to the end."""
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{bench}", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("bench", ["fair_share_pass", "priority_quota_pass"])
def test_a_pass_bench_runs_on_a_small_cluster(bench: str) -> None:
    small = ["--agents", "20", "--slots", "4", "--pending", "100", "--workspaces", "4", "--rounds", "1"]
    assert "session pass after one change" in _run_bench(bench, *small)


def test_the_trial_phases_bench_runs_on_a_small_cluster() -> None:
    small = [
        "--agents",
        "4",
        "--slots",
        "2",
        "--trials",
        "40",
        "--rounds",
        "2",
        "--ending",
        "4",
        "--senders",
        "4",
    ]
    summary = _run_bench("trial_phases", *small).strip().splitlines()[-1]
    assert summary.startswith("trial_phases: place "), summary
    assert "nan" not in summary, summary


def test_the_control_plane_cost_bench_runs_on_a_local_cluster() -> None:
    # Four no-op trials on a real cluster: each service's CPU is read from /proc, the master's
    # work for them is more than nothing.
    summary = _run_bench("control_plane_cost", "--trials", "4").strip().splitlines()[-1]
    assert summary.startswith("control_plane_cost: master "), summary
    master_ms = float(summary.split("master ")[1].split(" ms")[0])
    assert master_ms > 0.0, summary
