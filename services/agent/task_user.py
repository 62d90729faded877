"""The unprivileged user the process runtime runs tasks as, and the folders it runs them in.

Trial code must not reach the control plane's secrets or state (the cluster token, the master's
database, the agent's bookkeeping). The process runtime gets that from three things:
  * the task runs as another user (--task-user) that owns nothing of the cluster's;
  * its working directory is a folder of its own under --task-root, outside every state directory
    (which stay owner-only), so the task user never needs to traverse them;
  * its environment is built from scratch (containers/task_env.py), and the shim that supervises
    it gets only the basics too, so even /proc/<shim>/environ holds no secret.

Switching users needs root. The shim itself stays the agent's user (it must keep signalling and
reporting on the command); only the command drops privileges, through setpriv(1): after the
optional mount namespace has bound /run/determined (which needs root), setpriv sets the groups,
gid and uid, and re-arms the parent-death signal that a credential change clears.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Owner rwx, others traverse only: the per-agent folder the containers' task folders live in.
_TASK_ROOT_MODE = 0o711
_TASK_DIR_MODE = 0o700
_INIT_GROUPS = "--init-groups"
_CLEAR_GROUPS = "--clear-groups"


class TaskUserError(ValueError):
    """--task-user or --task-root cannot be honoured; the message names the flag."""


@dataclass(frozen=True)
class TaskUser:
    name: str
    uid: int
    gid: int
    # By its full path: the task's own PATH (its config may set one) need not lead to it.
    setpriv: str = "/usr/bin/setpriv"
    # The user's supplementary groups from the group database (initgroups needs a passwd entry for
    # the uid); False: none at all (a linked uid the task cannot look up).
    init_groups: bool = True

    def run_as(self, argv: list[str]) -> list[str]:
        """`argv` run as this user by setpriv, which execs it (pid and process group unchanged)."""
        return [
            self.setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            _INIT_GROUPS if self.init_groups else _CLEAR_GROUPS,
            "--pdeathsig=KILL",
            "--",
            *argv,
        ]

    def environment(self, task_dir: Path) -> dict[str, str]:
        """Who the task is, as a login would say: the task user, at home in its own folder (a
        system user's home usually does not exist)."""
        return {"USER": self.name, "LOGNAME": self.name, "HOME": str(task_dir)}


def resolve_task_user(name: str) -> TaskUser:
    """The user named by --task-user; TaskUserError when this agent cannot run tasks as it."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise TaskUserError(f"--task-user: no user {name!r} on this machine") from None
    if entry.pw_uid == 0:
        raise TaskUserError(f"--task-user: {name!r} is root; tasks need an unprivileged user")
    if os.geteuid() != 0 and entry.pw_uid != os.geteuid():
        raise TaskUserError(
            f"--task-user: running tasks as {name!r} needs root; this agent runs as uid {os.geteuid()}"
        )
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise TaskUserError("--task-user: setpriv (util-linux) is not installed; it switches the task's user")
    return TaskUser(name=name, uid=entry.pw_uid, gid=entry.pw_gid, setpriv=setpriv)


def isolation_warning(user: TaskUser | None) -> str | None:
    """What an operator must know when tasks are not isolated from the agent; None when they are."""
    if user is not None and user.uid != os.geteuid():
        return None
    me = pwd.getpwuid(os.geteuid()).pw_name if _has_passwd_entry(os.geteuid()) else str(os.geteuid())
    if os.geteuid() == 0:
        return (
            "tasks run as root, the agent's own user: trial code can read the cluster token and the "
            "control plane's state; give --task-user NAME (an unprivileged user) to isolate them"
        )
    return (
        f"tasks run as {me!r}, the agent's own user: trial code can read whatever the agent can "
        "(the cluster token, state directories of this user); isolating them needs the agent to run "
        "as root with --task-user NAME"
    )


def _has_passwd_entry(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def is_inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def own_tmp(workdir: Path | str) -> str:
    """The /tmp folder TaskDirs makes beside a container's working directory `workdir`."""
    return f"{workdir}.tmp"


class TaskDirs:
    """Two folders per container under `root`, owned by the task user (0700): its working directory
    and its /tmp (private_mounts.py binds that on /tmp); the task writes only there, and other
    users cannot look in."""

    def __init__(self, root: Path, user: TaskUser) -> None:
        self.root = root
        self.user = user

    def prepare_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chown(self.root, os.geteuid(), os.getegid())
        os.chmod(self.root, _TASK_ROOT_MODE)

    def path(self, container_id: str) -> Path:
        return self.root / container_id

    def tmp_path(self, container_id: str) -> Path:
        return Path(own_tmp(self.path(container_id)))

    def create(self, container_id: str, user: TaskUser | None = None) -> Path:
        """The container's working directory and its /tmp, both empty, owned by `user` (default:
        the task user); returns the former."""
        owner = user or self.user
        for folder in (self.path(container_id), self.tmp_path(container_id)):
            # A leftover of an earlier agent run with this container id: start afresh.
            if folder.is_symlink():
                folder.unlink()
            elif folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(mode=_TASK_DIR_MODE)
            os.chmod(folder, _TASK_DIR_MODE)  # mkdir's mode is masked by the umask
            os.chown(folder, owner.uid, owner.gid)
        return self.path(container_id)

    def hand_over(self, folder: Path, user: TaskUser | None = None) -> None:
        """Make `folder` and everything in it `user`'s (default: the task user's): what the agent
        unpacked or wrote for the task, the model definition, the /run/determined files. Links are
        not followed."""
        owner = user or self.user
        os.chown(folder, owner.uid, owner.gid, follow_symlinks=False)
        for parent, dirs, files in os.walk(folder):
            for name in (*dirs, *files):
                os.chown(os.path.join(parent, name), owner.uid, owner.gid, follow_symlinks=False)

    def remove(self, container_id: str) -> None:
        shutil.rmtree(self.path(container_id), ignore_errors=True)
        self.remove_tmp(container_id)

    def remove_tmp(self, container_id: str) -> None:
        shutil.rmtree(self.tmp_path(container_id), ignore_errors=True)


def split_run_as(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(prefix, command) of a command line TaskUser.run_as made; ([], argv) for any other."""
    words = list(argv)
    if (
        len(words) > 6
        and os.path.basename(words[0]) == "setpriv"
        and words[1].startswith("--reuid=")
        and words[2].startswith("--regid=")
        and words[3] in (_INIT_GROUPS, _CLEAR_GROUPS)
        and words[4:6] == ["--pdeathsig=KILL", "--"]
    ):
        return words[:6], words[6:]
    return [], words


def run_as_ids(prefix: Sequence[str]) -> tuple[int, int] | None:
    """(uid, gid) a split_run_as prefix switches to; None for no prefix."""
    if not prefix:
        return None
    return int(prefix[1].removeprefix("--reuid=")), int(prefix[2].removeprefix("--regid="))
