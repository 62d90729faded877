"""Running a task as the Linux account its owner or workspace is linked to (Determined's
agent_user_group), on the process runtime.

The master names the account (uid, gid, user and group names); the agent runs the command as it
instead of as --task-user, in folders handed over to it. Determined adds the linked user to the
container's /etc/passwd (and its group to /etc/group) so that `id -un`, `whoami` and libraries that
look the user up work; the process runtime does the same inside the task's private mount namespace:
a copy of the machine's /etc/passwd (/etc/group) with the account's line added is bound over the
file for that task only. A uid (gid) the machine already knows keeps the machine's entry, with its
supplementary groups (what NFS permissions are decided by).
"""

from __future__ import annotations

import grp
import os
import pwd
import re
from pathlib import Path

from services.agent.requests import RunAsRequest
from services.agent.runtime.private_mounts import Bind
from services.agent.task_user import TaskUser

_PASSWD = "/etc/passwd"
_GROUP = "/etc/group"
# The master checks the same (domain/identity/agent_users.py); checked again here because the names
# are written into the task's account files, where a ':' or a newline would forge an entry.
_LINUX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_MAX_ID = 2**31 - 1


def problem(run_as: RunAsRequest) -> str | None:
    """Why the account cannot be run as, naming the field; None when it can."""
    for name, number in (("uid", run_as.uid), ("gid", run_as.gid)):
        if not 0 <= number <= _MAX_ID:
            return f"start.spec.run_as.{name}: {number} is not a Linux id"
    for name, text in (("user", run_as.user), ("group", run_as.group)):
        if not _LINUX_NAME.fullmatch(text):
            return f"start.spec.run_as.{name}: {text[:40]!r} is not a Linux name"
    return None


def known_uid(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def known_gid(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True


def linked_user(run_as: RunAsRequest, task_user: TaskUser) -> TaskUser:
    """The account as a TaskUser. An account the machine knows gets its supplementary groups
    (setpriv --init-groups looks the uid up before the task's own passwd lines exist: a warm
    start's interpreter is started before its container's binds); one it does not know has none,
    as the task's own /etc/group gives it none either."""
    return TaskUser(
        name=run_as.user,
        uid=run_as.uid,
        gid=run_as.gid,
        setpriv=task_user.setpriv,
        init_groups=known_uid(run_as.uid),
    )


def account_files(run_as: RunAsRequest, folder: Path, home: Path) -> list[Bind]:
    """Copies of /etc/passwd and /etc/group with the account's entries added, written in `folder`
    (the container's own, which the task cannot reach), each as a bind over the original; only
    for what the machine does not know already."""
    binds = []
    if not known_uid(run_as.uid):
        line = f"{run_as.user}:x:{run_as.uid}:{run_as.gid}:{run_as.user}:{home}:/bin/sh\n"
        binds.append(_with_line(Path(_PASSWD), line, folder / "passwd"))
    if not known_gid(run_as.gid):
        binds.append(_with_line(Path(_GROUP), f"{run_as.group}:x:{run_as.gid}:\n", folder / "group"))
    return binds


def _with_line(original: Path, line: str, copy: Path) -> Bind:
    text = original.read_text() if original.exists() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    copy.write_text(text + line)
    os.chmod(copy, 0o644)  # every user reads the account files, as the originals
    return Bind(copy, str(original))
