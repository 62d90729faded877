"""Notebooks: JupyterLab tasks. The user's config says where and with what it runs (resources,
environment, bind_mounts, description) and, as Determined's, its idle_timeout and
notebook_idle_type; the entrypoint is Cairn's own launcher (cairn.notebook_server, in the task
environment), which serves JupyterLab on the task's service port under /proxy/{task_id}/, reports
the allocation ready once Jupyter answers and, for a notebook that can time out, reports whether it
is idle (tasks/notebook_idle.py). Jupyter's token is the allocation's credential, which only the
master's proxy presents."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

import cairn.task_environment as tenv
from services.common.principal import Principal
from services.master.configuration.durations import parse_duration
from services.master.domain.kernel.context import Work
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads.tasks import TaskRow
from services.master.domain.task_kinds.kind import KindDescription, Proxy, proxy_path
from services.master.store import models

NOTEBOOK_ENTRYPOINT = ("python", "-m", "cairn.notebook_server")
# Determined's notebook_idle_type values; the first is its default.
IDLE_TYPES = ("kernels_or_terminals", "kernel_connections", "activity")


def idle_timeout_s(config: dict[str, Any]) -> float | None:
    """The config's idle_timeout in seconds; None when the notebook never times out."""
    value = config.get("idle_timeout")
    return None if value in (None, "") else parse_duration(value, "config.idle_timeout")


def idle_type(config: dict[str, Any]) -> str:
    value = config.get("notebook_idle_type") or IDLE_TYPES[0]
    if value not in IDLE_TYPES:
        raise InvalidArgument(f"config.notebook_idle_type: {value!r} is not one of {', '.join(IDLE_TYPES)}")
    return str(value)


def _check_config(config: dict[str, Any]) -> None:
    idle_timeout_s(config)
    idle_type(config)


def _environment(w: Work, task: models.Task, port: str) -> dict[str, str]:
    env = {"NOTEBOOK_PORT": port}  # Determined's name for the service port
    if idle_timeout_s(task.config or {}) is not None:
        # The launcher reports idleness (notebook_idle.py) only for a notebook that can time out.
        env[tenv.NOTEBOOK_IDLE_TYPE] = idle_type(task.config or {})
    return env


def _shows(s: Session, principal: Principal, row: TaskRow, secrets: bool) -> dict[str, Any]:
    return {"service_address": proxy_path(row.task.id)}


NOTEBOOK = KindDescription(
    kind=TaskKind.NOTEBOOK,
    launcher=NOTEBOOK_ENTRYPOINT,
    runs="a notebook runs JupyterLab",
    check_config=_check_config,
    description="JupyterLab",
    proxy=Proxy.HTTP,
    service_credential=True,
    environment=_environment,
    shows=_shows,
)
