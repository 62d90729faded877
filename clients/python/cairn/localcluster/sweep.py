"""Trial processes an agent left behind (it was killed, or could not stop them in time).

Read from the files the agent really writes (cairn.agent_files, the one definition the agent uses
too): each container's shim.json names its supervisor (pid + start time; the shim leads its own
session, so its pid is its process group) and child.json the command's process group. Once the
agents are stopped, any of them still alive has nobody left to report to, and is killed:
  * the command's group, unless exit.json says the shim already ended it and swept that group
    (after which the group id may belong to someone else);
  * the shim's group, when the shim still runs with the start time it recorded (a pid alone may
    have been reused).
Then the Docker containers (docker runtime) labelled with one of those agents' work dirs are
removed, through the docker SDK; without the SDK or a reachable dockerd there are none to remove.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cairn.agent_files import DOCKER_LABEL_WORK_DIR, ContainerPaths, WorkDirPaths
from cairn.localcluster.processes import group_members, process_start_ticks, signal_group

log = logging.getLogger(__name__)

_SWEEP_WAIT_S = 5.0


@dataclass(frozen=True)
class SweptProcess:
    container: str
    pgid: int
    # "command" (the trial's own process group) or "shim" (its supervisor's).
    what: str


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _group_id(data: dict[str, Any] | None, key: str) -> int | None:
    value = data.get(key) if data else None
    # Never group 0/1: that would be ours or init's.
    return value if isinstance(value, int) and value > 1 else None


def leftover_groups(container: ContainerPaths) -> list[tuple[str, int]]:
    """The live process groups of `container` that only its (dead) agent could have stopped."""
    found: list[tuple[str, int]] = []
    command = _group_id(_read(container.child_info), "pgid")
    if command is not None and not container.exit_report.exists() and group_members(command):
        found.append(("command", command))
    shim_info = _read(container.shim_info)
    shim = _group_id(shim_info, "pid")
    if shim is not None and group_members(shim):
        recorded = shim_info.get("start_ticks") if shim_info else None
        if recorded is None or process_start_ticks(shim) in (None, recorded):
            found.append(("shim", shim))
    return found


def sweep_container_processes(work_dirs: Iterable[Path]) -> list[SweptProcess]:
    work_dirs = list(work_dirs)
    swept: list[SweptProcess] = []
    for work_dir in work_dirs:
        for container in WorkDirPaths(work_dir).all_containers():
            for what, pgid in leftover_groups(container):
                if signal_group(pgid, signal.SIGKILL):
                    log.info("killed leftover %s group pgid=%s container=%s", what, pgid, container.root)
                    swept.append(SweptProcess(container=container.root.name, pgid=pgid, what=what))
    deadline = time.monotonic() + _SWEEP_WAIT_S
    while time.monotonic() < deadline and any(group_members(item.pgid) for item in swept):
        time.sleep(0.05)
    # After the supervisors: none of them is left to report on (or recreate) what is removed here.
    sweep_docker_containers(work_dirs)
    return swept


def sweep_docker_containers(work_dirs: Iterable[Path]) -> list[str]:
    """Remove the Docker containers of these agents (running or not); their ids."""
    dirs = [str(Path(d).resolve()) for d in work_dirs]  # as the agent labels them
    if not dirs:
        return []
    try:
        import docker  # optional: the client works without it, and then no agent ran containers
        import docker.errors
    except ImportError:
        return []
    removed: list[str] = []
    try:
        client = docker.from_env(timeout=30)
        try:
            for work_dir in dirs:
                found = client.api.containers(
                    all=True, filters={"label": f"{DOCKER_LABEL_WORK_DIR}={work_dir}"}
                )
                for container in found:
                    client.api.remove_container(container["Id"], force=True, v=True)
                    log.info(
                        "removed leftover Docker container %s (agent work dir %s)",
                        container["Id"][:12],
                        work_dir,
                    )
                    removed.append(container["Id"])
        finally:
            client.close()
    except docker.errors.DockerException as exc:
        log.info("no Docker containers swept: %s", exc)
    return removed
