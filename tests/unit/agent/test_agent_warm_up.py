"""While a prepared interpreter waits for its command (runtime/warm_interpreter.py), it calls the
Core API's warm_up (cairn.core.master_session), so the trial's first gRPC channel costs less; a
warm-up that fails or is missing changes nothing the command sees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.agent.runtime import warm_interpreter

# The command: reports whether the warm-up ran before it (the fake hook leaves a file).
COMMAND = """
import os, sys
print("warmed" if os.path.exists("warmed-up") else "cold", flush=True)
sys.exit(7)
"""


def fake_core_api(root: Path, body: str) -> None:
    package = root / "cairn" / "core"
    package.mkdir(parents=True)
    (root / "cairn" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "master_session.py").write_text(body)


def run_prepared(tmp_path: Path, *modules: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "command.py").write_text(COMMAND)
    assignment = {
        "module": False,
        "target": str(tmp_path / "command.py"),
        "args": [],
        "unbuffered": False,
        "env": {"PATH": os.environ.get("PATH", "")},
        "cwd": str(tmp_path),
    }
    return subprocess.run(
        [sys.executable, "-c", Path(warm_interpreter.__file__).read_text(), *modules],
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        input=json.dumps(assignment) + "\n",
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_prepared_interpreter_warms_the_core_api_up_before_its_command(tmp_path: Path) -> None:
    fake_core_api(tmp_path, "def warm_up():\n    open('warmed-up', 'w').close()\n")
    done = run_prepared(tmp_path, "cairn.core.master_session")
    assert (done.returncode, done.stdout.strip()) == (7, "warmed"), done.stderr


@pytest.mark.parametrize(
    ("body", "modules"),
    [
        ("def warm_up():\n    raise RuntimeError('no warm-up today')\n", ("cairn.core.master_session",)),
        ("def warm_up():\n    open('warmed-up', 'w').close()\n", ()),  # not preloaded: not imported
    ],
)
def test_a_failing_or_absent_warm_up_leaves_the_command_as_it_was(
    tmp_path: Path, body: str, modules: tuple[str, ...]
) -> None:
    fake_core_api(tmp_path, body)
    done = run_prepared(tmp_path, *modules)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (7, "cold", "")


# In a process of its own: gRPC's threads are the C core's, counted from /proc.
WARM_UP_THREADS = """
import os, time
from cairn.core.master_session import warm_up
def threads():
    return len(os.listdir("/proc/self/task"))
before = threads()
warm_up()
deadline = time.monotonic() + 5
while time.monotonic() < deadline and threads() > before:
    time.sleep(0.05)
print(before, threads())
"""


def test_the_core_api_warm_up_dials_nothing_and_leaves_no_thread() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WARM_UP_THREADS], capture_output=True, text=True, timeout=30, check=True
    )
    before, after = done.stdout.split()
    # The threads its channel started are gone with it; nothing listens at its address, and
    # nothing waited for it (the run's timeout): the channel was not dialled.
    assert before == after
