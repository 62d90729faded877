"""What an agent needs to run a trial's allocation: the command and the task environment.

Every fact is given under a Cairn name (CAIRN_*) and, where Determined has one, under its DET_*
name too (reference §3.8), so both Cairn's Core API and Determined's harness find what they read.
The agent adds what only it knows (agent id, container id, slot ids, the master's address as it
reaches it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Any

import cairn.task_environment as tenv
from cairn.agent.v1 import agent_pb2 as apb
from services.master.configuration.settings import Settings
from services.master.domain.config import config_view
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.store import models

# Determined's legacy trial-class entrypoint, "model_def:MyTrial" (its util.match_legacy_trial_class).
LEGACY_TRIAL_CLASS = re.compile(r"^[a-zA-Z0-9_.]+:[a-zA-Z0-9_]+$")


def entrypoint_of(config: dict[str, Any]) -> tuple[list[str], bool]:
    """(command, run through `sh -c`) as Determined runs an entrypoint. A legacy trial class runs
    through Determined's own harness under its torch launcher, as Determined's launch layer does."""
    view = config_view(config)
    if view.entrypoint_is_shell and LEGACY_TRIAL_CLASS.match(view.entrypoint[0]):
        return [
            "python3",
            "-m",
            "determined.launch.torch_distributed",
            "--",
            "--trial",
            view.entrypoint[0],
        ], False
    return view.entrypoint, view.entrypoint_is_shell


@dataclass(frozen=True)
class ExperimentParts:
    """What every trial's spec takes from its experiment's config alone: worked out once for the
    trials of an experiment that start together (a pass starts dozens), not once for each (the
    config's JSON twice, its view twice and its container part were a fifth of a start)."""

    command: list[str]
    shell: bool
    environment: dict[str, str]
    config_json: str
    determined_config_json: str
    image: str
    mounts: tuple[tuple[str, str], ...]
    container_config: str
    description_command: str


def experiment_parts(config: dict[str, Any]) -> ExperimentParts:
    view = config_view(config)
    command, shell = entrypoint_of(config)
    config_json = json.dumps(config)
    determined = determined_view(config)
    storage = view.checkpoint_storage
    mounts: tuple[tuple[str, str], ...] = ()
    if storage.get("type") == "shared_fs" and storage.get("host_path"):
        mounts = ((str(storage["host_path"]), str(storage["host_path"])),)
    return ExperimentParts(
        command=command,
        shell=shell,
        environment=dict(view.environment_variables),
        config_json=config_json,
        determined_config_json=config_json if determined is config else json.dumps(determined),
        image=view.image or "",
        mounts=mounts,
        container_config=container_config(config),
        description_command=shlex.join(command) if not shell else command[0],
    )


def build_task_spec(
    settings: Settings,
    exp: models.Experiment,
    trial: models.Trial,
    alloc: models.Allocation,
    allocation_token: str,
    owner_username: str,
    parts: ExperimentParts | None = None,
) -> apb.TaskSpec:
    """`parts`: experiment_parts of the experiment's config, when the caller keeps them for the
    experiment's other trials."""
    if parts is None:
        parts = experiment_parts(exp.config)
    task_id = trial_task_id(exp.id, trial.request_id)
    # (Cairn's name, Determined's name, value): the same fact under both names.
    facts = [
        (tenv.ALLOCATION_ID, "DET_ALLOCATION_ID", alloc.id),
        (tenv.TASK_ID, "DET_TASK_ID", task_id),
        (tenv.TASK_TYPE, "DET_TASK_TYPE", "TRIAL"),
        (tenv.TRIAL_ID, "DET_TRIAL_ID", str(trial.id)),
        (tenv.EXPERIMENT_ID, "DET_EXPERIMENT_ID", str(exp.id)),
        (tenv.TRIAL_RUN_ID, "DET_TRIAL_RUN_ID", str(trial.run_id)),
        (tenv.TRIAL_SEED, "DET_TRIAL_SEED", str(trial.seed)),
        (tenv.HPARAMS, "DET_HPARAMS", json.dumps(trial.hparams)),
        (tenv.STEPS_COMPLETED, "DET_STEPS_COMPLETED", str(trial.total_batches)),
        (tenv.USER, "DET_USER", owner_username),
    ]
    env: dict[str, str] = dict(parts.environment)
    for cairn_name, determined_name, value in facts:
        env[cairn_name] = value
        env[determined_name] = value
    env[tenv.EXPERIMENT_CONFIG] = parts.config_json
    env["DET_EXPERIMENT_CONFIG"] = parts.determined_config_json
    env[tenv.ALLOCATION_TOKEN] = allocation_token
    env["DET_SESSION_TOKEN"] = allocation_token
    env[tenv.SEARCHER_TARGET] = str(trial.searcher_target)
    env[tenv.MASTER_HTTP_PORT] = str(settings.http_port)
    # Its own latest checkpoint, else the one it was warm-started from (as Determined hands it).
    start_from = trial.latest_checkpoint_uuid or trial.warm_start_checkpoint_uuid
    if start_from:
        env[tenv.LATEST_CHECKPOINT] = start_from
        env["DET_LATEST_CHECKPOINT"] = start_from
    env["PYTHONUNBUFFERED"] = "1"
    return apb.TaskSpec(
        entrypoint=parts.command,
        shell=parts.shell,
        environment=env,
        runtime="process",
        image=parts.image,
        kill_grace_seconds=settings.kill_grace_s,
        has_context=True,
        mounts=[apb.Mount(host_path=host, container_path=inside) for host, inside in parts.mounts],
        description=f"exp-{exp.id}-trial-{trial.id}: {parts.description_command}"[:200],
        container_config=parts.container_config,
    )


def container_config(config: dict[str, Any]) -> str:
    """The config's part that shapes a Docker container, for agents of the docker runtime (which
    read it with Determined's meaning: services/agent/runtime/docker_spec.py)."""
    environment = config.get("environment") or {}
    resources = config.get("resources") or {}
    part = {
        "environment": {
            key: environment[key]
            for key in (
                "image",
                "force_pull_image",
                "registry_auth",
                "environment_variables",
                "add_capabilities",
                "drop_capabilities",
                "preload_modules",  # warm starts on the process runtime
            )
            if environment.get(key) is not None
        },
        "resources": {
            key: resources[key] for key in ("shm_size", "devices") if resources.get(key) is not None
        },
        "bind_mounts": config.get("bind_mounts") or [],
    }
    return json.dumps(part, separators=(",", ":"))


def determined_view(config: dict[str, Any]) -> dict[str, Any]:
    """The config as Determined's harness should see it in a process (no container): shared_fs is
    mounted at /determined_shared_fs in Determined's containers, which a process does not have, so
    the harness is told it is a directory at the host path (the same files)."""
    storage = config.get("checkpoint_storage") or {}
    if storage.get("type") != "shared_fs" or not storage.get("host_path"):
        return config
    base = os.path.normpath(os.path.join(str(storage["host_path"]), str(storage.get("storage_path") or "")))
    directory = {"type": "directory", "container_path": base}
    for key in ("save_experiment_best", "save_trial_best", "save_trial_latest"):
        if key in storage:
            directory[key] = storage[key]
    return {**config, "checkpoint_storage": directory}
