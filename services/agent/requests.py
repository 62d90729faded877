"""What the master asks of the agent, in the agent's own terms (converted from the proto at the edge)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MountRequest:
    host_path: str
    container_path: str
    read_only: bool = False


@dataclass(frozen=True)
class RunAsRequest:
    """The Linux account the task runs as (its owner's or workspace's agent_user_group)."""

    uid: int
    gid: int
    user: str
    group: str


@dataclass(frozen=True)
class RendezvousInfo:
    """Where the containers of the allocation find each other (see the proto's Rendezvous)."""

    container_addrs: tuple[str, ...]
    container_slot_counts: tuple[int, ...]
    container_rank: int
    c10d_port: int = 0
    collectives_port: int = 0
    det_pub_port: int = 0
    det_pull_port: int = 0

    @property
    def chief_ip(self) -> str:
        return self.container_addrs[0]


@dataclass(frozen=True)
class StartRequest:
    container_id: str
    allocation_id: str
    slot_ids: tuple[str, ...]
    entrypoint: tuple[str, ...]
    shell: bool = False
    environment: dict[str, str] = field(default_factory=dict)
    runtime: str = "process"
    image: str = ""
    kill_grace_seconds: int = 0
    has_context: bool = False
    # The SHA-256 (hex) of the context archive, when the master knows it: a kept copy will do.
    context_digest: str = ""
    mounts: tuple[MountRequest, ...] = ()
    description: str = ""
    # None from a master that sent none: the container is then rank 0 of 1.
    rendezvous: RendezvousInfo | None = None
    # The config's container-shaping part, JSON (docker runtime; see runtime/docker_spec.py).
    container_config: str = ""
    # Containers still on these slots whose tasks are exiting (an early hand-over): the command
    # starts once they have ended.
    after_container_ids: tuple[str, ...] = ()
    # None: the agent's own task user (or its own user), as without a link.
    run_as: RunAsRequest | None = None


@dataclass(frozen=True)
class ContainerReport:
    """A container as the agent reports it in Hello (for reattachment)."""

    container_id: str
    allocation_id: str
    state: str
    slot_ids: tuple[str, ...]
    exit_code: int | None
    started_at: float | None
