"""Shells: an SSH server in a task (Determined's `det shell`). The user's config says where and with
what it runs (resources, environment, bind_mounts, description); the entrypoint is Cairn's own
server (cairn.shell_server, in the task environment), which lets in only the key pair the master
makes for the shell and listens on the task's service port, reached only through the master's
proxy (a TCP tunnel over a websocket at /proxy/{task_id}/, what Determined's ssh ProxyCommand
speaks)."""

from __future__ import annotations

from typing import Any

from services.common.principal import Principal
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import TaskKind
from services.master.domain.task_kinds import shell_keys
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.tasks import tasks
from services.master.store import models

SHELL_ENTRYPOINT = ["python", "-m", "cairn.shell_server"]


def shell_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config a shell runs with: the user's, with Cairn's entrypoint."""
    if "entrypoint" in config and config["entrypoint"] not in (None, SHELL_ENTRYPOINT):
        raise InvalidArgument(
            "config.entrypoint: a shell runs Cairn's SSH server; its entrypoint cannot be set"
        )
    result = dict(config)
    result["entrypoint"] = list(SHELL_ENTRYPOINT)
    if not result.get("description"):
        result["description"] = "Shell"
    return result


def _store_keys(w: Work, task: models.Task) -> None:
    shell_keys.store(w.session, task.id, shell_keys.generate(comment=f"cairn-shell-{task.id}"))


def start(
    ctx: MasterContext,
    principal: Principal,
    config: dict[str, Any],
    files: list[ContextFile],
    workspace_id: int | None,
) -> str:
    """A new shell task with its own key pair; its id."""
    return tasks.create(
        ctx,
        principal,
        tasks.TaskRequest(
            kind=TaskKind.SHELL,
            config=shell_config(config),
            files=files,
            workspace_id=workspace_id,
            prepare=_store_keys,
        ),
    )
