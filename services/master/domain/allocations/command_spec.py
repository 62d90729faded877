"""What an agent needs to run the allocation of a task that is not a trial, of any kind: its
entrypoint (the user's, or the launcher its kind put in its config), and the task environment
Determined gives every task (reference §3.8: DET_TASK_ID, DET_ALLOCATION_ID, DET_SESSION_TOKEN,
DET_TASK_TYPE, DET_USER...) without any of a trial's (no experiment, trial, hparams or checkpoint).
The agent adds what only it knows, as for trials: agent id, container id, slot ids, the master's
address.
"""

from __future__ import annotations

import shlex
from typing import Any

import cairn.task_environment as tenv
from cairn.agent.v1 import agent_pb2 as apb
from services.master.configuration.settings import Settings
from services.master.domain.allocations.task_spec import container_config
from services.master.domain.config.view import environment_of
from services.master.store import models


def command_entrypoint(config: dict[str, Any]) -> tuple[list[str], bool]:
    """(command, run through `sh -c`) as Determined's command entrypoint runs it: one string is a
    shell line (`det cmd run 'echo hi; exit 3'`), several are exec'd as given; a string in the
    config is a shell line too."""
    entrypoint = config.get("entrypoint")
    if isinstance(entrypoint, str):
        return [entrypoint], True
    parts = [str(part) for part in entrypoint or []]
    return parts, len(parts) == 1


def bind_mounts(config: dict[str, Any]) -> list[apb.Mount]:
    """The config's bind_mounts, Determined's fields (host_path, container_path, read_only)."""
    mounts = []
    for mount in config.get("bind_mounts") or []:
        if isinstance(mount, dict) and mount.get("host_path") and mount.get("container_path"):
            mounts.append(
                apb.Mount(
                    host_path=str(mount["host_path"]),
                    container_path=str(mount["container_path"]),
                    read_only=bool(mount.get("read_only", False)),
                )
            )
    return mounts


def build_command_spec(
    settings: Settings,
    task: models.Task,
    alloc: models.Allocation,
    allocation_token: str,
    owner_username: str,
) -> apb.TaskSpec:
    config = task.config or {}
    command, shell = command_entrypoint(config)
    variables, image = environment_of(config.get("environment") or {})
    env: dict[str, str] = dict(variables)
    # (Cairn's name, Determined's name, value): the same fact under both names.
    facts = [
        (tenv.ALLOCATION_ID, "DET_ALLOCATION_ID", alloc.id),
        (tenv.TASK_ID, "DET_TASK_ID", task.id),
        (tenv.TASK_TYPE, "DET_TASK_TYPE", task.kind),
        (tenv.USER, "DET_USER", owner_username),
        (tenv.ALLOCATION_TOKEN, "DET_SESSION_TOKEN", allocation_token),
    ]
    for cairn_name, determined_name, value in facts:
        env[cairn_name] = value
        env[determined_name] = value
    env[tenv.MASTER_HTTP_PORT] = str(settings.http_port)
    env["PYTHONUNBUFFERED"] = "1"
    return apb.TaskSpec(
        entrypoint=command,
        shell=shell,
        environment=env,
        runtime="process",
        image=image or "",
        kill_grace_seconds=settings.kill_grace_s,
        # A task with no context directory has an empty archive: fetching it costs one round trip.
        has_context=True,
        mounts=bind_mounts(config),
        description=f"{task.kind.lower()}-{task.id}: {command[0] if shell else shlex.join(command)}"[:200],
        container_config=container_config(config),
    )
