"""From a task's Determined-style configuration to the Docker container that runs it: a pure
translation (no Docker here), so every field's meaning is tested without a daemon.

The configuration is the part of an experiment config that shapes the container, as the master
sends it (TaskSpec.container_config, JSON): `environment` (image, force_pull_image, registry_auth,
environment_variables, add_capabilities, drop_capabilities), `resources` (shm_size, devices) and
`bind_mounts`. Semantics follow Determined's:
  * `image` and `environment_variables` are one value, or one per device flavour {cpu, cuda}:
    a container holding GPU slots takes `cuda`, any other `cpu`;
  * GPU slots become one NVIDIA device request for exactly those GPUs, by uuid;
  * CPU slots get a cpu-shares weight of 1024 per slot (containers share the machine's cores in
    proportion to the slots they hold) and, when the agent is told a number of cores per CPU slot,
    a hard limit of that many cores per slot;
  * host networking, always (Determined's default; this machine's dockerd has no bridge);
  * `shm_size` null means Determined's default of 4 GiB.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from cairn import task_image
from cairn.agent_files import DOCKER_LABELS

# Where the task's files live inside the container (Determined's layout): the working directory
# with the model definition, and the folder of /run/determined/info and the model's pristine copy.
CONTAINER_WORKDIR = "/run/determined/workdir"
CONTAINER_RUN_DIR = "/run/determined"
DEFAULT_SHM_BYTES = 4 << 30
CPU_SHARES_PER_SLOT = 1024
PROPAGATIONS = ("rprivate", "private", "rshared", "shared", "rslave", "slave")
DEVICE_FLAVOURS = ("cpu", "cuda")

_MEMORY_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)
_UNIT_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


class ContainerConfigError(ValueError):
    """A configuration field that cannot become a container; the message names the field."""


@dataclass(frozen=True)
class BindMount:
    host_path: str
    container_path: str
    read_only: bool = False
    propagation: str = "rprivate"


@dataclass(frozen=True)
class DeviceMapping:
    host_path: str
    container_path: str
    permissions: str = "rwm"

    def docker_text(self) -> str:
        return f"{self.host_path}:{self.container_path}:{self.permissions}"


@dataclass(frozen=True)
class ContainerSpec:
    """Everything the Docker runtime needs to create and run one container."""

    image: str
    command: list[str]
    env: dict[str, str]
    labels: dict[str, str]
    working_dir: str = CONTAINER_WORKDIR
    force_pull: bool = False
    registry_auth: dict[str, str] | None = None
    mounts: list[BindMount] = field(default_factory=list)
    devices: list[DeviceMapping] = field(default_factory=list)
    gpu_uuids: list[str] = field(default_factory=list)
    shm_size: int = DEFAULT_SHM_BYTES
    cpu_shares: int = CPU_SHARES_PER_SLOT
    nano_cpus: int = 0  # 0: no hard limit
    cap_add: list[str] = field(default_factory=list)
    cap_drop: list[str] = field(default_factory=list)
    network_mode: str = "host"
    # "uid:gid" (docker --user): the account linked to the task's owner or workspace; "": the
    # image's own user. Its names, added to the container's /etc/passwd and /etc/group where the
    # image lacks the ids (as Determined adds the user to its containers' passwd).
    user: str = ""
    user_name: str = ""
    group_name: str = ""

    def owner(self) -> tuple[int, int] | None:
        """(uid, gid) the task's files are given to in the container; None: left as they are."""
        if not self.user:
            return None
        uid, gid = self.user.split(":")
        return int(uid), int(gid)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContainerSpec:
        values = dict(data)
        values["mounts"] = [BindMount(**m) for m in values.get("mounts", [])]
        values["devices"] = [DeviceMapping(**d) for d in values.get("devices", [])]
        return cls(**values)


@dataclass(frozen=True)
class SlotShare:
    """What the spec needs of the container's slots."""

    gpu_uuids: tuple[str, ...] = ()
    cpu_slots: int = 0

    @property
    def flavour(self) -> str:
        return "cuda" if self.gpu_uuids else "cpu"


@dataclass(frozen=True)
class DockerDefaults:
    """The agent's own settings for containers: the image of tasks that name none, and the cores a
    CPU slot may use at most (0: no limit)."""

    image: str
    cpus_per_slot: float = 0.0


def parse_memory_size(value: Any, where: str) -> int:
    """Bytes from an integer or a text such as "4G", "512Mi", "1.5 GB" (powers of 1024, as Docker
    and Determined read them)."""
    if isinstance(value, bool):
        raise ContainerConfigError(f"{where}: must be a memory size such as 4G or 512Mi, not {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ContainerConfigError(f"{where}: must not be negative")
        return value
    if not isinstance(value, str):
        raise ContainerConfigError(f"{where}: must be a memory size such as 4G or 512Mi, not {value!r}")
    match = _MEMORY_SIZE.match(value)
    if not match:
        raise ContainerConfigError(f"{where}: {value!r} is not a memory size such as 4G or 512Mi")
    number, unit, _binary, _b = match.groups()
    return int(float(number) * (1024 ** _UNIT_POWER[unit.lower()]))


def _per_flavour(value: Any, flavour: str, where: str) -> Any:
    """One value for every flavour, or {cpu, cuda}: the one for `flavour`."""
    if not isinstance(value, dict):
        return value
    unknown = sorted(set(value) - {*DEVICE_FLAVOURS, "rocm", "gpu"})
    if unknown:
        raise ContainerConfigError(f"{where}: unknown device flavour {unknown[0]!r} (use cpu or cuda)")
    chosen = value.get(flavour)
    if chosen is None and flavour == "cuda":
        chosen = value.get("gpu")  # Determined's older name for the GPU flavour
    return chosen


def choose_image(environment: Mapping[str, Any], share: SlotShare, defaults: DockerDefaults) -> str:
    image = _per_flavour(environment.get("image"), share.flavour, "environment.image")
    if image is None or image == "":
        return defaults.image
    if not isinstance(image, str):
        raise ContainerConfigError(f"environment.image: must be an image name, not {image!r}")
    if any(ch.isspace() for ch in image):
        raise ContainerConfigError(f"environment.image: {image!r} must not contain spaces")
    return image


def environment_variables(environment: Mapping[str, Any], flavour: str) -> dict[str, str]:
    where = "environment.environment_variables"
    value = _per_flavour(environment.get("environment_variables"), flavour, where)
    if value is None:
        return {}
    if not isinstance(value, list):
        raise ContainerConfigError(f"{where}: must be a list of KEY=VALUE, or one per device flavour")
    variables: dict[str, str] = {}
    for index, item in enumerate(value):
        if not isinstance(item, str) or "=" not in item or item.startswith("="):
            raise ContainerConfigError(f"{where}[{index}]: {item!r} must have the form KEY=VALUE")
        key, _, text = item.partition("=")
        variables[key] = text
    return variables


def registry_auth(environment: Mapping[str, Any]) -> dict[str, str] | None:
    where = "environment.registry_auth"
    auth = environment.get("registry_auth")
    if auth is None:
        return None
    if not isinstance(auth, dict):
        raise ContainerConfigError(f"{where}: must be an object (username, password, serveraddress, ...)")
    allowed = {"username", "password", "serveraddress", "email", "auth", "identitytoken", "registrytoken"}
    unknown = sorted(set(auth) - allowed)
    if unknown:
        raise ContainerConfigError(f"{where}.{unknown[0]}: unknown field (use {', '.join(sorted(allowed))})")
    for key, value in auth.items():
        if not isinstance(value, str):
            raise ContainerConfigError(f"{where}.{key}: must be a string")
    return dict(auth)


def bind_mounts(config_mounts: Any, task_mounts: Sequence[BindMount]) -> list[BindMount]:
    """The config's bind_mounts after the task's own (shared checkpoint storage): one per
    container path, the config's winning, relative container paths under the working directory."""
    if config_mounts is None:
        config_mounts = []
    if not isinstance(config_mounts, list):
        raise ContainerConfigError("bind_mounts: must be a list")
    by_target: dict[str, BindMount] = {}
    for mount in task_mounts:
        by_target[_container_path(mount.container_path or mount.host_path)] = mount
    for index, item in enumerate(config_mounts):
        where = f"bind_mounts[{index}]"
        if not isinstance(item, dict):
            raise ContainerConfigError(f"{where}: must be an object with host_path and container_path")
        unknown = sorted(set(item) - {"host_path", "container_path", "read_only", "propagation"})
        if unknown:
            raise ContainerConfigError(f"{where}.{unknown[0]}: unknown field")
        host = item.get("host_path")
        target = item.get("container_path")
        if not isinstance(host, str) or not host.startswith("/"):
            raise ContainerConfigError(f"{where}.host_path: must be an absolute path, not {host!r}")
        if not isinstance(target, str) or not target:
            raise ContainerConfigError(f"{where}.container_path: required")
        read_only = item.get("read_only", False)
        if not isinstance(read_only, bool):
            raise ContainerConfigError(f"{where}.read_only: must be true or false")
        propagation = item.get("propagation") or "rprivate"
        if propagation not in PROPAGATIONS:
            raise ContainerConfigError(
                f"{where}.propagation: {propagation!r} is not one of {', '.join(PROPAGATIONS)}"
            )
        path = _container_path(target)
        if path in (CONTAINER_WORKDIR, CONTAINER_RUN_DIR):
            raise ContainerConfigError(f"{where}.container_path: {path} is where the task's own files go")
        by_target[path] = BindMount(host, path, read_only, propagation)
    return [BindMount(m.host_path, target, m.read_only, m.propagation) for target, m in by_target.items()]


def _container_path(path: str) -> str:
    return path if path.startswith("/") else f"{CONTAINER_WORKDIR}/{path}"


def devices(resources: Mapping[str, Any]) -> list[DeviceMapping]:
    value = resources.get("devices") or []
    if not isinstance(value, list):
        raise ContainerConfigError("resources.devices: must be a list")
    found = []
    for index, item in enumerate(value):
        where = f"resources.devices[{index}]"
        host: Any
        target: Any
        mode: Any
        if isinstance(item, str):
            parts = item.split(":")
            if not 1 <= len(parts) <= 3 or not parts[0]:
                raise ContainerConfigError(f"{where}: {item!r} must be HOST[:CONTAINER[:MODE]]")
            host = parts[0]
            target = parts[1] if len(parts) > 1 and parts[1] else host
            mode = parts[2] if len(parts) > 2 else "rwm"
        elif isinstance(item, dict):
            unknown = sorted(set(item) - {"host_path", "container_path", "mode"})
            if unknown:
                raise ContainerConfigError(f"{where}.{unknown[0]}: unknown field")
            host = item.get("host_path")
            target = item.get("container_path") or host
            mode = item.get("mode") or "rwm"
        else:
            raise ContainerConfigError(f"{where}: must be a string or an object")
        if not isinstance(host, str) or not host.startswith("/"):
            raise ContainerConfigError(f"{where}: host path {host!r} must be absolute")
        if not isinstance(target, str) or not target.startswith("/"):
            raise ContainerConfigError(f"{where}: container path {target!r} must be absolute")
        if not isinstance(mode, str) or not mode or set(mode) - set("rwm"):
            raise ContainerConfigError(f"{where}: mode {mode!r} must be made of r, w and m")
        found.append(DeviceMapping(host, target, mode))
    return found


def capabilities(environment: Mapping[str, Any], key: str) -> list[str]:
    value = environment.get(key) or []
    if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value):
        raise ContainerConfigError(f"environment.{key}: must be a list of capability names")
    return list(value)


def _section(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = config.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ContainerConfigError(f"{key}: must be an object")
    return value


def container_spec(
    config: Mapping[str, Any],
    *,
    command: Sequence[str],
    env: Mapping[str, str],
    share: SlotShare,
    labels: Mapping[str, str],
    task_mounts: Sequence[BindMount] = (),
    defaults: DockerDefaults,
    user: tuple[int, int, str, str] | None = None,
) -> ContainerSpec:
    """The container for a task: `command` and `env` as the agent built them for every runtime
    (the task environment), `config` the experiment config's container-shaping part."""
    environment = _section(config, "environment")
    resources = _section(config, "resources")
    force_pull = environment.get("force_pull_image", False)
    if not isinstance(force_pull, bool):
        raise ContainerConfigError("environment.force_pull_image: must be true or false")
    task_env = dict(env)
    task_env.update(environment_variables(environment, share.flavour))
    if share.gpu_uuids:
        # The device request shows the container exactly its GPUs, numbered from 0 inside; the
        # host's indices in CUDA_VISIBLE_DEVICES would point at the wrong ones (or none).
        task_env.pop("CUDA_VISIBLE_DEVICES", None)
    shm = resources.get("shm_size")
    cpu_slots = max(share.cpu_slots, 1 if not share.gpu_uuids else 0)
    unknown_labels = sorted(set(labels) - set(DOCKER_LABELS))
    if unknown_labels:
        raise ContainerConfigError(f"labels: {unknown_labels[0]!r} is not a Cairn container label")
    return ContainerSpec(
        image=choose_image(environment, share, defaults),
        command=list(command),
        env=task_env,
        labels=dict(labels),
        force_pull=force_pull,
        registry_auth=registry_auth(environment),
        mounts=bind_mounts(config.get("bind_mounts"), task_mounts),
        devices=devices(resources),
        gpu_uuids=list(share.gpu_uuids),
        shm_size=DEFAULT_SHM_BYTES if shm is None else parse_memory_size(shm, "resources.shm_size"),
        cpu_shares=CPU_SHARES_PER_SLOT * max(cpu_slots, 1),
        nano_cpus=int(defaults.cpus_per_slot * cpu_slots * 1e9) if cpu_slots else 0,
        cap_add=capabilities(environment, "add_capabilities"),
        cap_drop=capabilities(environment, "drop_capabilities"),
        user=f"{user[0]}:{user[1]}" if user is not None else "",
        user_name=user[2] if user is not None else "",
        group_name=user[3] if user is not None else "",
    )


def with_account(text: str, number: int, line: str) -> str | None:
    """An /etc/passwd or /etc/group text with `line` added when no entry has id `number` (its
    third field); None when one has (the image's own entry stays)."""
    for entry in text.splitlines():
        fields = entry.split(":")
        if len(fields) > 2 and fields[2] == str(number):
            return None
    if text and not text.endswith("\n"):
        text += "\n"
    return text + line + "\n"


# The image when neither the config nor the agent's --default-image names one and the task image's
# tag cannot be computed (the client is installed without the repository it is hashed from).
FALLBACK_IMAGE = "cairn-task:latest"


def default_task_image() -> str:
    """The task image `make task-image` builds from this checkout (cairn.task_image names it)."""
    try:
        return task_image.image_tag()
    except (task_image.TaskImageError, OSError):
        return FALLBACK_IMAGE
