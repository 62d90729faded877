"""The supervisor's own exit (runtime/shim.py): it leaves without the interpreter's finalization
once its work is done, with its exit status and what it wrote kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from services.agent.runtime.protocol import ContainerPaths

REPO_ROOT = Path(__file__).resolve().parents[3]


def _run_shim(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`python -m services.agent.runtime.shim ARGS` as the agent starts it, run to its end."""
    return subprocess.run(
        [sys.executable, "-m", "services.agent.runtime.shim", *args],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
        **kwargs,
    )


def test_the_shim_leaves_with_its_status_its_words_and_its_report(tmp_path: Path) -> None:
    paths = ContainerPaths(tmp_path / "c1")
    paths.meta.mkdir(parents=True)  # and no launch.json: the shim reports that and fails
    done = _run_shim(str(paths.meta))
    assert done.returncode == 1
    assert "no readable launch spec" in done.stderr
    report = json.loads(paths.exit_report.read_text())
    assert report["error"] == "launch spec missing or unreadable"


def test_a_standby_told_it_is_not_needed_leaves_with_status_0(tmp_path: Path) -> None:
    done = _run_shim("--standby", input="", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
