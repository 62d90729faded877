"""A prepared interpreter's exit (runtime/warm_interpreter.py): what a program can observe of
Python's own exit is kept (exit status, non-daemon threads, atexit, flushed files and C stdio), the
interpreter's finalization is skipped unless the command asks for it (CAIRN_WARM_EXIT=full)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from services.agent.runtime import warm_interpreter

SCRIPT = """
import atexit, ctypes, os, sys, threading, time, weakref

left_open = open("left-open.txt", "w")
left_open.write("written, never closed\\n")

def late():
    time.sleep(0.3)
    with open("thread.txt", "w") as done:
        done.write("finished\\n")

threading.Thread(target=late).start()
atexit.register(lambda: print("atexit ran", flush=True))
ctypes.CDLL(None).printf(b"from C stdio\\n")
print("from Python")

class Finalized:
    def __del__(self):
        os.write(1, b"finalized\\n")

kept = Finalized()
own = Finalized()
weakref.finalize(own, os.write, 1, b"the command's finalizer\\n")
how = os.environ["HOW"]
if how == "raise":
    raise ValueError("boom")
if how == "message":
    sys.exit("a message for stderr")
if how == "interrupt":
    raise KeyboardInterrupt
sys.exit(int(how))
"""


# A module that, as torch.library does, registers a finalizer as it is imported.
PRELOADED = """
import os, weakref
class Registered:
    pass
registered = Registered()
weakref.finalize(registered, os.write, 1, b"the preloaded module's finalizer\\n")
"""


def run_warm(tmp_path: Path, how: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "trial.py").write_text(SCRIPT)
    (tmp_path / "preloaded_with_finalizer.py").write_text(PRELOADED)
    assignment = {
        "module": False,
        "target": str(tmp_path / "trial.py"),
        "args": [],
        "unbuffered": False,
        "env": {"PATH": os.environ.get("PATH", ""), "HOW": how, **extra_env},
        "cwd": str(tmp_path),
    }
    text = Path(warm_interpreter.__file__).read_text()
    return subprocess.run(
        [sys.executable, "-c", text, "json", "preloaded_with_finalizer"],
        check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        input=json.dumps(assignment) + "\n",
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("how", "status", "stderr"),
    [
        ("0", 0, ""),
        ("3", 3, ""),
        ("-1", 255, ""),
        ("raise", 1, "ValueError: boom"),
        ("message", 1, "a message for stderr"),
        ("interrupt", -signal.SIGINT, "KeyboardInterrupt"),
    ],
)
def test_the_exit_status_and_what_the_program_left_are_those_of_pythons_own_exit(
    tmp_path: Path, how: str, status: int, stderr: str
) -> None:
    done = run_warm(tmp_path, how)

    assert done.returncode == status
    assert done.stderr.strip().endswith(stderr)
    lines = done.stdout.splitlines()
    assert {"from Python", "from C stdio", "atexit ran"} <= set(lines)
    # The non-daemon thread ran to its end before the process did; the unclosed file was flushed.
    assert (tmp_path / "thread.txt").read_text() == "finished\n"
    assert (tmp_path / "left-open.txt").read_text() == "written, never closed\n"
    # No finalization: objects alive at exit are not torn down one by one, and the finalizers the
    # preloaded modules registered are theirs; the command's own finalizers run, as atexit does.
    assert "finalized" not in lines
    assert "the command's finalizer" in lines
    assert "the preloaded module's finalizer" not in lines


def test_a_command_can_ask_for_the_interpreters_full_finalization(tmp_path: Path) -> None:
    done = run_warm(tmp_path, "4", CAIRN_WARM_EXIT="full")

    assert done.returncode == 4
    assert {"atexit ran", "the command's finalizer", "the preloaded module's finalizer"} <= set(
        done.stdout.splitlines()
    )
    assert (tmp_path / "thread.txt").read_text() == "finished\n"
