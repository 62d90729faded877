"""The Linux account tasks run as (Determined's agent_user_group): a user's link, a workspace's link,
and which of them a task gets.

As in Determined: an admin links a user (`det user link-with-agent-user`) or a workspace (`det
workspace create/edit --agent-uid ...`) to a uid, gid, user name and group name; a task runs as its
workspace's link where the workspace has one, else as its owner's, else as the cluster's task user
(Determined's `security.default_task`; Cairn's agent --task-user). Determined merges the two field by
field; Cairn stores a link whole (all four fields or none), so the merge is the workspace's link
whenever it has one.

Checked before anything is stored: all four fields together, ids within what a Linux uid/gid holds
(and the proto's int32), names that are Linux account names (they are written into the task's
/etc/passwd and /etc/group, so no ':' or newline can ever reach those files). uid 0 is refused
unless the operator allows it (--allow-root-agent-user): Determined accepts any uid >= 0 (its own
default task user is root), but a Cairn agent drops its tasks' privileges on purpose, and a link to
root would undo that for every task of the user or workspace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy.orm import Session

from services.master.domain.kernel.errors import InvalidArgument
from services.master.store import models

# useradd's rule, widened to upper case and dots as most distributions allow: a letter or '_' first,
# then letters, digits, '_', '.', '-'; at most 32 characters (the utmp limit useradd enforces).
_LINUX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
# The proto's int32; also below 2**32 - 1, the kernel's "no id" ((uid_t) -1).
MAX_ID = 2**31 - 1


@dataclass(frozen=True)
class AgentUserGroup:
    uid: int
    gid: int
    user: str
    group: str


@dataclass(frozen=True)
class AgentUserGroupRequest:
    """The four fields as a request sent them (None: not sent). All None: remove the link."""

    uid: int | None = None
    gid: int | None = None
    user: str | None = None
    group: str | None = None


def checked(request: AgentUserGroupRequest, field: str, *, allow_root: bool) -> AgentUserGroup | None:
    """The link `request` asks for (None: remove it); InvalidArgument naming the field otherwise."""
    values = {
        "agentUid": request.uid,
        "agentGid": request.gid,
        "agentUser": request.user,
        "agentGroup": request.group,
    }
    missing = [name for name, value in values.items() if value is None]
    if len(missing) == len(values):
        return None
    if missing:
        raise InvalidArgument(
            f"{field}: agentUid, agentGid, agentUser and agentGroup go together; missing {', '.join(missing)}"
        )
    assert request.uid is not None and request.gid is not None
    assert request.user is not None and request.group is not None
    for name, number in (("agentUid", request.uid), ("agentGid", request.gid)):
        if not 0 <= number <= MAX_ID:
            raise InvalidArgument(f"{field}.{name}: must be between 0 and {MAX_ID}, not {number}")
    for name, text in (("agentUser", request.user), ("agentGroup", request.group)):
        if not _LINUX_NAME.fullmatch(text):
            raise InvalidArgument(
                f"{field}.{name}: a Linux name (1-32 letters, digits, '_', '.', '-', not starting with a "
                f"digit, '.' or '-'), not {text[:40]!r}"
            )
    if request.uid == 0 and not allow_root:
        raise InvalidArgument(
            f"{field}.agentUid: 0 is root; tasks run as root only where the master allows it "
            "(--allow-root-agent-user)"
        )
    return AgentUserGroup(uid=request.uid, gid=request.gid, user=request.user, group=request.group)


def of_row(row: models.User | models.Workspace) -> AgentUserGroup | None:
    """A user's or workspace's stored link; None where it has none."""
    if row.agent_uid is None or row.agent_gid is None or row.agent_user is None or row.agent_group is None:
        return None
    return AgentUserGroup(uid=row.agent_uid, gid=row.agent_gid, user=row.agent_user, group=row.agent_group)


def store(row: models.User | models.Workspace, link: AgentUserGroup | None) -> None:
    """Set (or, with None, remove) the link of a user or workspace row."""
    row.agent_uid = link.uid if link else None
    row.agent_gid = link.gid if link else None
    row.agent_user = link.user if link else None
    row.agent_group = link.group if link else None


def for_task(owner: AgentUserGroup | None, workspace: AgentUserGroup | None) -> AgentUserGroup | None:
    """Who a task runs as: its workspace's link wins over its owner's; None: the cluster's task user."""
    return workspace if workspace is not None else owner


def for_task_of(s: Session, owner_id: int, workspace_id: int | None) -> AgentUserGroup | None:
    """for_task of a task's owner and workspace, read from the database."""
    owner = s.get_one(models.User, owner_id)
    workspace = s.get(models.Workspace, workspace_id) if workspace_id is not None else None
    return for_task(of_row(owner), of_row(workspace) if workspace is not None else None)
