"""Notebooks: JupyterLab tasks. The user's config says where and with what it runs (resources,
environment, bind_mounts, description); the entrypoint is Cairn's own launcher
(cairn.notebook_server, in the task environment), which serves JupyterLab on the task's service
port under /proxy/{task_id}/ and reports the allocation ready once Jupyter answers."""

from __future__ import annotations

from typing import Any

from services.common.principal import Principal
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import TaskKind
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.task_kinds.notebook_settings import idle_timeout_s, idle_type
from services.master.domain.tasks import tasks

NOTEBOOK_ENTRYPOINT = ["python", "-m", "cairn.notebook_server"]


def proxy_path(task_id: str) -> str:
    """Where a browser opens the notebook: through the master, never at the agent."""
    return f"/proxy/{task_id}/"


def notebook_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config a notebook runs with: the user's, with Cairn's entrypoint."""
    if "entrypoint" in config and config["entrypoint"] not in (None, NOTEBOOK_ENTRYPOINT):
        raise InvalidArgument("config.entrypoint: a notebook runs JupyterLab; its entrypoint cannot be set")
    idle_timeout_s(config)
    idle_type(config)
    result = dict(config)
    result["entrypoint"] = list(NOTEBOOK_ENTRYPOINT)
    if not result.get("description"):
        result["description"] = "JupyterLab"
    return result


def start(
    ctx: MasterContext,
    principal: Principal,
    config: dict[str, Any],
    files: list[ContextFile],
    workspace_id: int | None,
) -> str:
    """A new notebook task; its id."""
    return tasks.create(
        ctx,
        principal,
        tasks.TaskRequest(
            kind=TaskKind.NOTEBOOK, config=notebook_config(config), files=files, workspace_id=workspace_id
        ),
    )
