"""Whether a local cluster's trials run as an unprivileged user, and where their files then live.

Run as root, a local cluster gives its agents --task-user (TASK_USER, created with `useradd
--system` the first time) so that trial code cannot read the cluster token or the master's
database. Everything a task must reach then lies outside the (owner-only) state directory, under
SHARED_ROOT/<key of the state directory>: the tasks' working folders and the default checkpoint
folder. Without root, or when the task user could not even start the trials' interpreter (it
lives in a folder the user cannot enter), the trials run as the cluster's own user, as before, and
`cluster up` says so rather than pretend.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TASK_USER = "cairn-task"
# Outside every home folder, so the task user can reach it.
SHARED_ROOT = Path("/var/lib/cairn/clusters")
_PROBE_TIMEOUT_S = 30.0
_TMP = Path("/tmp")


class TaskIsolationError(Exception):
    """The task user asked for cannot be had; the message says why."""


@dataclass(frozen=True)
class TaskIsolation:
    user: str
    # The agents' --task-root is <tasks_root>/<agent id>.
    tasks_root: Path
    checkpoint_dir: Path


def shared_dir(state_dir: Path) -> Path:
    """This cluster's folder under SHARED_ROOT: one per state directory, the same on every `up`."""
    key = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:16]
    return SHARED_ROOT / key


def decide(
    *,
    state_dir: Path,
    runtime: str,
    interpreter: str,
    requested_user: str | None,
    progress: Callable[[str], None],
) -> TaskIsolation | None:
    """The isolation the cluster's agents give their trials, or None (said through `progress`).
    `requested_user`: None picks TASK_USER when root; "" turns isolation off."""
    if runtime != "process" or requested_user == "":
        return None  # the docker runtime isolates by container
    if os.geteuid() != 0:
        progress(
            "warning: trials run as this user, not isolated from the cluster (they can read its token "
            "and state); isolating them needs `cluster up` as root"
        )
        return None
    name = requested_user or TASK_USER
    entry = _ensure_user(name, create=requested_user is None, progress=progress)
    problem = _cannot_run(entry, interpreter)
    if problem:
        progress(f"warning: trials run as root, not isolated from the cluster: {problem}")
        return None
    base = shared_dir(state_dir)
    tasks_root = base / "tasks"
    checkpoint_dir = base / "checkpoints"
    for folder in (SHARED_ROOT, base, tasks_root):
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o711)  # others may pass through to their own folders, not list them
    checkpoint_dir.mkdir(exist_ok=True)
    os.chown(checkpoint_dir, entry.pw_uid, entry.pw_gid)
    checkpoint_dir.chmod(0o700)
    progress(f"trials run as user {name!r}, in {tasks_root}; default checkpoints in {checkpoint_dir}")
    environment = Path(interpreter).parent.parent
    if environment == _TMP or _TMP in environment.parents:
        # The agent gives each trial a private /tmp only where that hides nothing the trial needs.
        progress(
            f"note: the trials' Python environment ({environment}) is under /tmp, so trials share "
            "this machine's /tmp (each one's TMPDIR is a folder of its own)"
        )
    return TaskIsolation(user=name, tasks_root=tasks_root, checkpoint_dir=checkpoint_dir)


def _ensure_user(name: str, *, create: bool, progress: Callable[[str], None]) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        if not create:
            raise TaskIsolationError(f"task user: no user {name!r} on this machine") from None
    useradd = shutil.which("useradd")
    if useradd is None:
        raise TaskIsolationError(
            f"task user: {name!r} does not exist and useradd is not installed to create it"
        )
    result = subprocess.run(
        [
            useradd,
            "--system",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0 and not _exists(name):  # a concurrent `up` may have created it
        raise TaskIsolationError(
            f"task user: cannot create {name!r}: {result.stderr.strip() or result.returncode}"
        )
    progress(f"created the system user {name!r} that trials run as")
    return pwd.getpwnam(name)


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _cannot_run(entry: pwd.struct_passwd, interpreter: str) -> str | None:
    """Why `entry` cannot start the trials' interpreter as trials do (`python3` looked up on a PATH
    led by its folder); None when it can. A folder on its way the user may not enter makes the
    lookup pass over it to another Python, so the probe checks which Python answered."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return "setpriv (util-linux) is not installed"
    bin_dir = Path(interpreter).parent
    expected = str(bin_dir.parent)  # the environment's sys.prefix
    probe = [
        setpriv,
        f"--reuid={entry.pw_uid}",
        f"--regid={entry.pw_gid}",
        "--init-groups",
        "--",
        "sh",
        "-c",
        'exec python3 -c "import sys; print(sys.prefix)"',
    ]
    env = {"PATH": os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"]), "LANG": "C.UTF-8"}
    try:
        result = subprocess.run(
            probe, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False, cwd="/", env=env
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"user {entry.pw_name!r} cannot run {interpreter}: {exc}"
    answered = result.stdout.strip()
    if result.returncode != 0 or answered != expected:
        detail = (result.stderr.strip().splitlines() or [f"python3 there is {answered or 'missing'}"])[-1]
        return (
            f"user {entry.pw_name!r} cannot run {interpreter} ({detail}); "
            "give it a task environment it can reach (--task-env)"
        )
    return None
