"""Shells: an SSH server in a task (Determined's `det shell`). The user's config says where and with
what it runs (resources, environment, bind_mounts, description); the entrypoint is Cairn's own
server (cairn.shell_server, in the task environment), which lets in only the key pair the master
makes for the shell (shell_keys.py, stored beside the task) and listens on the task's service port,
reached only through the master's proxy (a TCP tunnel over a websocket at /proxy/{task_id}/, what
Determined's ssh ProxyCommand speaks). The private key goes only to the shell's owner or an admin,
and only in the answers `det shell start` and `det shell open` read it from, never in a listing."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

import cairn.task_environment as tenv
from services.common.principal import Principal
from services.master.domain.identity import agent_users
from services.master.domain.kernel.context import Work
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads.tasks import TaskRow
from services.master.domain.task_kinds import shell_keys
from services.master.domain.task_kinds.kind import KindDescription, Proxy
from services.master.store import models

SHELL_ENTRYPOINT = ("python", "-m", "cairn.shell_server")


def _store_keys(w: Work, task: models.Task) -> None:
    shell_keys.store(w.session, task.id, shell_keys.generate(comment=f"cairn-shell-{task.id}"))


def _environment(w: Work, task: models.Task, port: str) -> dict[str, str]:
    return {tenv.SHELL_PUBLIC_KEY: shell_keys.public_key(w.session, task.id)}


def _shows(s: Session, principal: Principal, row: TaskRow, secrets: bool) -> dict[str, Any]:
    keys = shell_keys.keys_for(s, principal, row.task)
    # `det shell open` logs in as agentUserGroup.user; Cairn's SSH server runs the session as the
    # task's own account whatever name it is given: the linked account's name where the shell has
    # one (as Determined shows it), else the shell's owner's.
    link = agent_users.for_task_of(s, row.task.owner_id, row.task.workspace_id)
    shown: dict[str, Any] = {"user": row.username}
    if link is not None:
        shown = {"user": link.user, "uid": link.uid, "group": link.group, "gid": link.gid}
    return {
        "private_key": keys.private_key if secrets else "",
        "public_key": keys.public_key,
        "agent_user_group": shown,
    }


SHELL = KindDescription(
    kind=TaskKind.SHELL,
    launcher=SHELL_ENTRYPOINT,
    runs="a shell runs Cairn's SSH server",
    description="Shell",
    store_beside=_store_keys,
    proxy=Proxy.TCP,
    environment=_environment,
    shows=_shows,
)
