"""The docker runtime, agent side: every container is a Docker container, supervised by its own
docker_shim.py (in a session of its own, as the process runtime's shim), speaking the same files
with the agent, so the container manager treats both runtimes alike.

What only the docker runtime does here:
  * before a container starts: check its configuration and image, and pull the image when it is
    missing or the config forces a pull (the container is PULLING meanwhile, the pull's progress
    in its log); an image that is not here and cannot be pulled ends the container with an error
    naming the image;
  * at launch: turn the configuration, the slots and the task environment into docker.json
    (docker_spec.container_spec) for the shim;
  * after an agent restart: a container whose supervisor is gone but which Docker still has
    (found by its labels) gets a new supervisor that takes it over (docker_shim --attach);
  * the agent's own backstops for overdue kills go to Docker (SIGKILL, then removal), and
    containers labelled with this agent's work dir that no container record claims are removed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn.agent_files import (
    DOCKER_LABEL_AGENT_ID,
    DOCKER_LABEL_ALLOCATION_ID,
    DOCKER_LABEL_CONTAINER_ID,
    DOCKER_LABEL_DESCRIPTION,
    DOCKER_LABEL_WORK_DIR,
)
from services.agent.requests import StartRequest
from services.agent.runtime.docker_engine import DockerEngine, ImageUnavailable
from services.agent.runtime.docker_spec import (
    BindMount,
    ContainerConfigError,
    ContainerSpec,
    DockerDefaults,
    SlotShare,
    container_spec,
)
from services.agent.runtime.jsonfile import read_json, write_json_atomic
from services.agent.runtime.process_runtime import ContainerSetupError, Note, ProcessRuntime, ShimHandle
from services.agent.runtime.protocol import ContainerPaths, LaunchSpec
from services.agent.runtime.standbys import Standby
from services.agent.slots import DeviceKind, SlotInfo
from services.agent.system_metrics.proc import Selector, pid_namespace_of
from services.common.logging import get_logger

if TYPE_CHECKING:
    from services.agent.containers.record import ContainerRecord

log = get_logger(__name__)


def config_of(request: StartRequest) -> dict[str, Any]:
    if not request.container_config:
        return {}
    try:
        config = json.loads(request.container_config)
    except ValueError as exc:
        raise ContainerSetupError(f"start.spec.container_config: not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ContainerSetupError("start.spec.container_config: must be a JSON object")
    return config


class DockerRuntime(ProcessRuntime):
    name = "docker"
    shim_module = "services.agent.runtime.docker_shim"

    def __init__(
        self,
        *,
        engine: DockerEngine,
        agent_id: str,
        work_dir: Path,
        slots: Sequence[SlotInfo],
        defaults: DockerDefaults,
        python: str = sys.executable,
    ) -> None:
        super().__init__(python)
        self._engine = engine
        self._agent_id = agent_id
        self._work_dir = str(work_dir)
        self._slots = {slot.id: slot for slot in slots}
        self._defaults = defaults

    # -- before the start ------------------------------------------------------------------------
    def spec_for(
        self, request: StartRequest, command: Sequence[str], env: Mapping[str, str]
    ) -> ContainerSpec:
        slots = [self._slots[s] for s in request.slot_ids if s in self._slots]
        share = SlotShare(
            gpu_uuids=tuple(s.uuid for s in slots if s.kind == DeviceKind.CUDA),
            cpu_slots=sum(1 for s in slots if s.kind == DeviceKind.CPU),
        )
        labels = {
            DOCKER_LABEL_AGENT_ID: self._agent_id,
            DOCKER_LABEL_CONTAINER_ID: request.container_id,
            DOCKER_LABEL_ALLOCATION_ID: request.allocation_id,
            DOCKER_LABEL_WORK_DIR: self._work_dir,
            DOCKER_LABEL_DESCRIPTION: request.description,
        }
        try:
            return container_spec(
                config_of(request),
                command=command,
                env=env,
                share=share,
                labels=labels,
                task_mounts=[
                    BindMount(m.host_path, m.container_path or m.host_path, m.read_only)
                    for m in request.mounts
                ],
                defaults=self._defaults,
                user=(
                    (request.run_as.uid, request.run_as.gid, request.run_as.user, request.run_as.group)
                    if request.run_as is not None
                    else None
                ),
            )
        except ContainerConfigError as exc:
            raise ContainerSetupError(str(exc)) from exc

    def before_start(self, request: StartRequest, note: Note, pulling: Callable[[], None]) -> None:
        spec = self.spec_for(request, (), {})
        if self._engine.has_image(spec.image) and not spec.force_pull:
            return
        pulling()
        why = "forced by environment.force_pull_image" if spec.force_pull else "not found locally"
        note(f"pulling image {spec.image} ({why})", "INFO")
        try:
            self._engine.pull(spec.image, spec.registry_auth, lambda line: note(line, "INFO"))
        except ImageUnavailable as exc:
            # With force_pull_image a local copy does not do either (as in Determined).
            raise ContainerSetupError(str(exc)) from exc
        note(f"pulled image {spec.image}", "INFO")

    def launch(
        self,
        paths: ContainerPaths,
        spec: LaunchSpec,
        request: StartRequest | None = None,
        standby: Standby | None = None,
    ) -> ShimHandle:
        """Its supervisor, always a cold one: the docker runtime keeps no standbys (take_standby
        gives none)."""
        if request is None:
            raise ValueError("the docker runtime launches a container from its start request")
        write_json_atomic(paths.docker_spec, self.spec_for(request, spec.argv, spec.env).to_json())
        return super().launch(paths, spec)

    # -- after a restart -------------------------------------------------------------------------
    def attach(self, pid: int, ticks: int | None, paths: ContainerPaths | None = None) -> ShimHandle:
        handle = super().attach(pid, ticks)
        if paths is None or self.is_alive(handle) or paths.exit_report.exists():
            return handle
        spec = read_json(paths.docker_spec)
        if spec is None or self._find(paths) is None:
            return handle  # nothing to take over: the manager reports the container lost
        log.warning(
            "container supervisor gone, the container still there: reattaching", container_id=paths.root.name
        )
        return self._start_shim(paths, None, ("--attach",))

    def remove_unclaimed(self, claimed: Collection[str]) -> list[str]:
        """Remove this agent's containers that no live container record claims (left when a
        supervisor died between the container's end and its removal, or by a lost start)."""
        removed = []
        for found in self._engine.find({DOCKER_LABEL_WORK_DIR: self._work_dir}):
            if found["labels"].get(DOCKER_LABEL_CONTAINER_ID) not in claimed:
                self._engine.remove(found["id"])
                removed.append(found["id"])
        return removed

    # -- backstops -------------------------------------------------------------------------------
    def kill_command_group(self, handle: ShimHandle | None, paths: ContainerPaths) -> None:
        docker_id = self._find(paths)
        if docker_id is not None and not paths.exit_report.exists():
            self._engine.signal(docker_id, "SIGKILL")

    def force_kill(self, handle: ShimHandle | None, paths: ContainerPaths) -> None:
        super().force_kill(handle, paths)
        docker_id = self._find(paths)
        if docker_id is not None:
            self._engine.remove(docker_id)

    def processes_of(self, record: ContainerRecord, paths: ContainerPaths) -> Selector | None:
        """The Docker container's PID namespace, by its first process; None when it has none yet,
        or shares the agent's (its processes could not be told apart from the machine's)."""
        docker_id = self._find(paths)
        pid = self._engine.first_pid(docker_id) if docker_id is not None else None
        namespace = pid_namespace_of(pid) if pid else None
        if namespace is None or namespace == pid_namespace_of(os.getpid()):
            return None
        return Selector("pidns", namespace)

    def _find(self, paths: ContainerPaths) -> str | None:
        found = self._engine.find(
            {DOCKER_LABEL_WORK_DIR: self._work_dir, DOCKER_LABEL_CONTAINER_ID: paths.root.name}
        )
        return str(found[0]["id"]) if found else None
