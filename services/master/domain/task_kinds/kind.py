"""What a kind of task is, as the master knows it: a description, one per kind, that says how its
config is checked and completed, what its container is launched with, whether and how the
master's proxy serves it, what the master stores beside it, and what its Determined message shows
beyond a command's fields. The task lifecycle, the allocations that launch a task, the proxy and
the Determined routes read a kind only through its description: none of them asks which kind it is.

Readiness goes with serving: a kind the proxy serves is ready once its service reports so
(AllocationReady, from the task's own process), and only then does the master record where the
proxy reaches it; a kind that serves nothing is never waited for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy.orm import Session

from cairn.agent.v1 import agent_pb2 as apb
from services.common.principal import Principal
from services.master.domain.kernel.context import Work
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads.tasks import TaskRow
from services.master.store import models

# What a launch names beside its config (a TensorBoard's experiments and trials), by field name.
Arguments = Mapping[str, Any]


class Proxy(StrEnum):
    """What the master's proxy serves of a task, at /proxy/{task_id}/."""

    NONE = "none"  # nothing: the task serves no port
    HTTP = "http"  # an HTTP service, for the task's owner or an admin with a session
    # A byte stream tunnelled over a websocket (a shell's SSH server). As in Determined, reached
    # without a session: the service's own credential (the shell's key) is what lets one in.
    TCP = "tcp"


def proxy_path(task_id: str) -> str:
    """Where a browser opens a task that serves: through the master, never at the agent."""
    return f"/proxy/{task_id}/"


def _no_check(config: dict[str, Any]) -> None:
    pass


def _nothing_to_add(config: dict[str, Any], arguments: Arguments) -> None:
    pass


def _no_environment(w: Work, task: models.Task, port: str) -> dict[str, str]:
    return {}


def _no_mounts(w: Work, task: models.Task) -> list[apb.Mount]:
    return []


def _shows_nothing_more(s: Session, principal: Principal, row: TaskRow, secrets: bool) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class KindDescription:
    kind: TaskKind

    # -- its config --
    # Cairn's launcher the task runs as config.entrypoint, which the user cannot set; None: the
    # user's own entrypoint (a command, a generic task), checked by the lifecycle like any config.
    launcher: tuple[str, ...] | None = None
    # What the refusal of another entrypoint says the kind runs: "a notebook runs JupyterLab".
    runs: str = ""
    # The kind's own config fields, checked before anything is stored (InvalidArgument naming one).
    check_config: Callable[[dict[str, Any]], None] = _no_check
    # What a launch names beside its config, checked and normalised before anything is stored
    # (reading what it names); None: a launch names nothing else.
    check_arguments: Callable[[Session, Arguments], Arguments] | None = None
    # The kind's defaults and what the launch records in the config, once checked.
    complete_config: Callable[[dict[str, Any], Arguments], None] = _nothing_to_add
    # The task's description when the user gave none (None: the lifecycle's, from its entrypoint).
    description: str | None = None

    # -- beside the task --
    # What the master stores beside a new task (a shell's key pair), in the task's own
    # transaction, so that its first allocation never starts without it.
    store_beside: Callable[[Work, models.Task], None] | None = None

    # -- its launch --
    proxy: Proxy = Proxy.NONE
    # Whether its service checks a credential that only the proxy presents (a notebook's Jupyter
    # takes the allocation's token hash as its token), so that nothing reaching the agent's port
    # directly can use it.
    service_credential: bool = False
    # What a serving task is told beside where it listens (the service port, as text).
    environment: Callable[[Work, models.Task, str], dict[str, str]] = _no_environment
    # What its containers see of the host.
    mounts: Callable[[Work, models.Task], list[apb.Mount]] = _no_mounts

    # -- its Determined message --
    # Its message's fields beyond a command's, by Determined's field names; `secrets`: the answers
    # that may carry a secret to its owner (a launch, a get; never a listing).
    shows: Callable[[Session, Principal, TaskRow, bool], dict[str, Any]] = _shows_nothing_more

    @property
    def serves(self) -> bool:
        return self.proxy != Proxy.NONE

    def config_for(self, config: dict[str, Any], arguments: Arguments) -> dict[str, Any]:
        """The config a task of this kind runs with: the user's, with the kind's launcher as its
        entrypoint, its own fields checked, its defaults and what the launch names."""
        if self.launcher is None:
            return dict(config)
        launcher = list(self.launcher)
        if "entrypoint" in config and config["entrypoint"] not in (None, launcher):
            raise InvalidArgument(f"config.entrypoint: {self.runs}; its entrypoint cannot be set")
        self.check_config(config)
        result = dict(config)
        result["entrypoint"] = launcher
        self.complete_config(result, arguments)
        if not result.get("description") and self.description:
            result["description"] = self.description
        return result
