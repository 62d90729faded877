"""bench/process_cpu.py: the CPU of what a command started, by kind, from real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.process_cpu import kind_of

REPO = Path(__file__).resolve().parents[3]
BUSY = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"


def test_kinds_name_what_a_process_runs() -> None:
    assert kind_of(["/venv/bin/python", "-m", "services.master", "--port", "0"]) == "services.master"
    assert kind_of(["python3", "-c", "import os\nprint(1)"]) == "python -c 'import os'"
    assert kind_of(["/usr/bin/sleep", "5"]) == "sleep 5"
    assert kind_of([]) == "(unknown)"


def test_a_grandchilds_cpu_is_counted_under_its_kind(tmp_path: Path) -> None:
    # The command starts a shell that starts the busy Python: a descendant two levels down.
    out = tmp_path / "cpu.json"
    command = ["sh", "-c", f"{sys.executable} -c '{BUSY}'; true"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.process_cpu", "--interval", "0.02", "--json", str(out), "--", *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    busy = [k for k in figures["kinds"] if k["kind"] == "python -c 'import time'"]
    assert len(busy) == 1 and busy[0]["processes"] == 1
    # 0.6 s of CPU, less what ran after the last sample.
    assert 0.4 <= busy[0]["cpu_s"] <= 1.0
    assert figures["exit"] == 0 and figures["wall_s"] >= 0.5
