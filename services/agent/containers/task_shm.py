"""What a process-runtime task takes from the config's container-shaping part: its /dev/shm, what
`resources.shm_size` gives a Docker container (runtime/docker_spec.py), a tmpfs of its own in the
task's mount namespace; and which image pull settings it leaves aside (it runs no image).

Unset, it is Determined's default of 4 GiB, as in Determined's containers (its Docker agents; its
HPC launchers share the host's /dev/shm, which is what a task here sees only where the agent cannot
give it a namespace). 0 is Docker's own default, 64 MiB (a tmpfs of size 0 would be unbounded)."""

from __future__ import annotations

import json

from services.agent.runtime.docker_spec import DEFAULT_SHM_BYTES, ContainerConfigError, parse_memory_size

DOCKER_ZERO_SHM_BYTES = 64 << 20
SHM_TARGET = "/dev/shm"


class ShmSizeError(ValueError):
    """The config's shm_size cannot be read (the master validates it first: a master of another
    build, or a config that bypassed it)."""


def shm_size(container_config: str) -> tuple[int, bool]:
    """(bytes, whether the config set it) for the task's /dev/shm."""
    try:
        config = json.loads(container_config) if container_config else {}
    except ValueError as exc:
        raise ShmSizeError(f"start.spec.container_config: not JSON: {exc}") from exc
    resources = config.get("resources") if isinstance(config, dict) else None
    value = resources.get("shm_size") if isinstance(resources, dict) else None
    if value is None:
        return DEFAULT_SHM_BYTES, False
    try:
        size = parse_memory_size(value, "resources.shm_size")
    except ContainerConfigError as exc:
        raise ShmSizeError(str(exc)) from exc
    return (size or DOCKER_ZERO_SHM_BYTES), True


def ignored_pull_settings(container_config: str) -> list[str]:
    """The image pull settings a config gives (environment.force_pull_image true, registry_auth),
    which the process runtime, running no image, leaves aside; unreadable JSON gives none (shm_size
    reports it)."""
    try:
        config = json.loads(container_config) if container_config else {}
    except ValueError:
        return []
    environment = config.get("environment") if isinstance(config, dict) else None
    if not isinstance(environment, dict):
        return []
    named = []
    if environment.get("force_pull_image") is True:
        named.append("environment.force_pull_image")
    if environment.get("registry_auth"):
        named.append("environment.registry_auth")
    return named
