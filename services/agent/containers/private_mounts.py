"""Starting a task in a mount namespace of its own, with some of its folders bound over fixed paths.

A Determined container has its own /run/determined and its own /tmp; the process runtime gives a
task the same with `unshare --mount --propagation private`: inside, each of the task's folders is
bound on its path, visible to that process tree only (other tasks and the host see theirs). That
takes root (the agent's privilege drop to the task user comes after, innermost in the command).

Why /tmp: tasks of different users must not share it, and Determined's harness itself writes fixed
names there (its DeepSpeed launcher's /tmp/pid_server-<allocation>), so two tasks on one machine
collide in a shared /tmp.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Runs inside the new namespace: "$@" is SOURCE TARGET pairs, then "--", then the task's command.
# unshare and sh both exec, so the task's process keeps the pid and process group the shim gave it.
_BIND_ALL_AND_EXEC = (
    'set -e; while [ "$1" != -- ]; do mkdir -p "$2"; mount --bind "$1" "$2"; shift 2; done; shift; exec "$@"'
)


@dataclass(frozen=True)
class Bind:
    source: Path  # the task's own folder
    target: str  # the path the task sees it at


def supported() -> bool:
    """Whether this agent can start tasks in private mount namespaces (root, unshare and mount)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("mount"):
        return False
    try:
        probe = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "--", "true"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def in_private_mounts(argv: list[str], binds: Sequence[Bind]) -> list[str]:
    """`argv` started in its own mount namespace with each bind in place (in order)."""
    if not binds:
        return argv
    pairs = [part for bind in binds for part in (str(bind.source), bind.target)]
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        _BIND_ALL_AND_EXEC,
        "sh",
        *pairs,
        "--",
        *argv,
    ]
