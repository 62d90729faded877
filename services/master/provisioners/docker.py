"""The `docker` provider: agents as containers of the service image (`make images`), on host
networking, one per instance, each running its trials as sibling containers of the task image
through the Docker socket it is given (the agent's `--runtime docker`).

    provider:
      type: docker
      agent_docker_image: cairn-service:latest   # Determined's key; the service image's tag
      docker_socket: /var/run/docker.sock
      master_address: 127.0.0.1:8090             # default: the master's own gRPC address
      agent_args: [--default-image, cairn-task:latest]

Containers are named and labelled by the instance (and the master's cluster id, so two clusters on
one Docker host never take each other's agents): launching an id whose container exists is a
no-op. Each agent's work directory is a folder of the master's state dir mounted at the same path,
so the labels its task containers carry name a path `cairn cluster down` can sweep. Terminating
sends SIGTERM (the agent stops its trials), SIGKILL after TERM_GRACE_S, and removes the container
once it has exited: nothing is left behind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import docker
import docker.errors

from cairn.agent_files import (
    PROVISIONER_LABEL_CLUSTER,
    PROVISIONER_LABEL_INSTANCE,
    PROVISIONER_LABEL_POOL,
    PROVISIONER_LABEL_WORK_DIR,
)
from services.common.cluster_token import TOKEN_ENV
from services.common.logging import get_logger
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.provisioning.provider import (
    JOIN_TOKEN_ENV,
    LaunchSpec,
    ProviderError,
    ProviderInstance,
    ProviderState,
)

log = get_logger(__name__)

TERM_GRACE_S = 30.0
DEFAULT_IMAGE = "cairn-service:latest"
_KEYS = {"agent_docker_image", "docker_socket", "master_address", "agent_args"}
_STATES = {
    "running": ProviderState.RUNNING,
    "created": ProviderState.STARTING,
    "restarting": ProviderState.STARTING,
}


def check_options(options: Mapping[str, Any], where: str) -> None:
    unknown = sorted(set(options) - _KEYS)
    if unknown:
        raise InvalidArgument(f"{where}.{unknown[0]}: not a setting of the docker provider")
    image = options.get("agent_docker_image", DEFAULT_IMAGE)
    if not isinstance(image, str) or not image or len(image) > 512:
        raise InvalidArgument(f"{where}.agent_docker_image: an image reference")
    socket = options.get("docker_socket", "/var/run/docker.sock")
    if not isinstance(socket, str) or not os.path.isabs(socket):
        raise InvalidArgument(f"{where}.docker_socket: an absolute path")


class DockerProvider:
    name = "docker"

    def __init__(
        self,
        pool: str,
        cluster_id: str,
        root: Path,
        image: str,
        agent_command: Sequence[str],
        token: str | None,
        docker_socket: str = "/var/run/docker.sock",
    ) -> None:
        """`agent_command`: the agent's command in the image up to the flags each instance gets."""
        self.pool = pool
        self.cluster_id = cluster_id
        self.root = root
        self.image = image
        self.agent_command = list(agent_command)
        self.token = token
        self.docker_socket = docker_socket
        self._asked_to_stop: dict[str, float] = {}
        self._connected: docker.DockerClient | None = None

    @property
    def _client(self) -> docker.DockerClient:
        """Connected on first use: a Docker daemon that is down shows on the pool and is retried,
        rather than stopping the master."""
        if self._connected is None:
            try:
                self._connected = docker.from_env(timeout=30)
            except docker.errors.DockerException as exc:
                raise ProviderError(f"cannot reach Docker: {exc}") from None
        return self._connected

    def _name(self, instance_id: str) -> str:
        return f"cairn-agent-{instance_id}"

    def _ours(self) -> dict[str, str]:
        return {PROVISIONER_LABEL_POOL: self.pool, PROVISIONER_LABEL_CLUSTER: self.cluster_id}

    def _containers(self, instance_id: str | None = None) -> list[dict[str, Any]]:
        labels = [f"{k}={v}" for k, v in self._ours().items()]
        if instance_id is not None:
            labels.append(f"{PROVISIONER_LABEL_INSTANCE}={instance_id}")
        try:
            return list(self._client.api.containers(all=True, filters={"label": labels}))
        except docker.errors.DockerException as exc:
            raise ProviderError(f"listing containers: {exc}") from None

    # ---- the contract ---------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> None:
        if self._containers(spec.instance_id):
            return  # made before (a master restart asks again)
        work_dir = self.root / spec.instance_id / "work"
        work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        command = [
            *self.agent_command,
            "--agent-id",
            spec.instance_id,
            "--resource-pool",
            spec.resource_pool,
            "--slots",
            str(spec.slots),
            "--work-dir",
            str(work_dir),
        ]
        environment = {TOKEN_ENV: self.token} if self.token else {}
        if spec.join_token:
            environment[JOIN_TOKEN_ENV] = spec.join_token
        try:
            socket_gid = os.stat(self.docker_socket).st_gid
            self._client.containers.run(
                self.image,
                command=command,
                name=self._name(spec.instance_id),
                detach=True,
                network_mode="host",
                environment=environment,
                # The master's own user (it owns the work dir), and the socket's group.
                user=f"{os.getuid()}:{os.getgid()}",
                group_add=[str(socket_gid)],
                volumes={
                    self.docker_socket: {"bind": self.docker_socket, "mode": "rw"},
                    str(work_dir): {"bind": str(work_dir), "mode": "rw"},
                },
                labels={
                    **self._ours(),
                    PROVISIONER_LABEL_INSTANCE: spec.instance_id,
                    PROVISIONER_LABEL_WORK_DIR: str(work_dir),
                },
            )
        except (OSError, docker.errors.DockerException) as exc:
            raise ProviderError(f"starting the agent container: {exc}") from None
        log.info("agent container started", instance_id=spec.instance_id, image=self.image)

    def list(self) -> list[ProviderInstance]:
        return [
            ProviderInstance(
                id=str(c["Labels"][PROVISIONER_LABEL_INSTANCE]),
                state=_STATES.get(str(c.get("State")), ProviderState.STOPPED),
            )
            for c in self._containers()
        ]

    def terminate(self, instance_id: str) -> None:
        for container in self._containers(instance_id):
            try:
                if container.get("State") not in ("running", "restarting", "created"):
                    self._client.api.remove_container(container["Id"], force=True, v=True)
                    self._asked_to_stop.pop(instance_id, None)
                    continue
                asked = self._asked_to_stop.setdefault(instance_id, time.monotonic())
                late = time.monotonic() - asked > TERM_GRACE_S
                self._client.api.kill(container["Id"], signal="SIGKILL" if late else "SIGTERM")
            except docker.errors.NotFound:
                continue
            except docker.errors.DockerException as exc:
                raise ProviderError(f"stopping the agent container of {instance_id}: {exc}") from None
