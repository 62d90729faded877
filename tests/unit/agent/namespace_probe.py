"""A standby's hand-over, as the bind-mount and /dev/shm tests try it: a shell already running in
a mount namespace of its own is given its mounts from outside by the binder's system calls
(services/agent/runtime/private_mounts.py), then runs its check. The binder runs in a fresh
interpreter: a test process has gRPC loaded (see test_agent_private_mounts.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


def bound_at_hand_over(script: str, script_args: list[str], binder: str, binder_args: list[str]) -> str:
    """What `sh -c SCRIPT` printed, run in a namespace of its own whose mounts `binder` (Python
    source, given the shell's pid then `binder_args`) made while the shell waited on its first
    `read line`."""
    probe = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", *script_args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Wait until unshare has made the namespace (the probe is the shell by then).
        shell = os.path.realpath(shutil.which("sh") or "/bin/sh")
        deadline = time.monotonic() + 10
        while os.path.realpath(f"/proc/{probe.pid}/exe") != shell and time.monotonic() < deadline:
            time.sleep(0.005)
        bound = subprocess.run(
            [sys.executable, "-c", binder, str(probe.pid), *binder_args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert bound.returncode == 0, bound.stderr
        out, _ = probe.communicate("go\n", timeout=10)
    finally:
        probe.kill()
        probe.wait()
    return out
