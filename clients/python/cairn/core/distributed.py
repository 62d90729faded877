"""`core.distributed`: the ranks of a trial's processes and collectives between them (Determined's
DistributedContext).

A trial of N slots runs N processes when a launcher starts one per slot (cairn.launch.torch_distributed,
torchrun, Determined's launchers), or one process per container when it runs its entrypoint as is.
`rank`/`size` count all processes, `local_*` those on this machine (container), `cross_*` the
machines. The collectives (gather, allgather, broadcast and their `_local` forms) move picklable
Python objects through a hub the chief runs (tcp_collectives.py); they are for coordination, not
for tensors (use torch.distributed for those).
"""

from __future__ import annotations

import abc
import logging
import os
from collections.abc import Mapping
from typing import Any

import cairn.task_environment as tenv
from cairn.core.tcp_collectives import GLOBAL, Member, TcpCollectives

log = logging.getLogger(__name__)

# Where the chief's hub listens when nothing says otherwise (on a cluster the master gives each
# allocation its own port: CAIRN_COLLECTIVES_PORT).
DEFAULT_COLLECTIVES_PORT = 30400
PORT_ENV = tenv.COLLECTIVES_PORT
# The secret the processes of one trial share; on a cluster, the allocation's token.
KEY_ENVS = (tenv.COLLECTIVES_KEY, tenv.ALLOCATION_TOKEN, "DET_SESSION_TOKEN")
LOCAL = "local"


class Collectives(abc.ABC):
    """Object collectives across all processes of the trial ("local": those on the same node)."""

    @abc.abstractmethod
    def gather(self, stuff: Any) -> list[Any] | None: ...

    @abc.abstractmethod
    def gather_local(self, stuff: Any) -> list[Any] | None: ...

    @abc.abstractmethod
    def allgather(self, stuff: Any) -> list[Any]: ...

    @abc.abstractmethod
    def allgather_local(self, stuff: Any) -> list[Any]: ...

    @abc.abstractmethod
    def broadcast(self, stuff: Any) -> Any: ...

    @abc.abstractmethod
    def broadcast_local(self, stuff: Any) -> Any: ...

    @abc.abstractmethod
    def close(self) -> None:
        """Release sockets and the like."""


class SingleProcessCollectives(Collectives):
    """One process: it is the chief, and every collective involves only its own object."""

    def gather(self, stuff: Any) -> list[Any] | None:
        return [stuff]

    def gather_local(self, stuff: Any) -> list[Any] | None:
        return [stuff]

    def allgather(self, stuff: Any) -> list[Any]:
        return [stuff]

    def allgather_local(self, stuff: Any) -> list[Any]:
        return [stuff]

    def broadcast(self, stuff: Any) -> Any:
        return stuff

    def broadcast_local(self, stuff: Any) -> Any:
        return stuff

    def close(self) -> None:
        """Nothing was opened."""


class HubCollectives(Collectives):
    """Collectives through the chief's hub (several processes)."""

    def __init__(self, connection: TcpCollectives, local_size: int) -> None:
        self._connection = connection
        self._local_size = local_size

    def gather(self, stuff: Any) -> list[Any] | None:
        result: list[Any] | None = self._connection.run("gather", GLOBAL, stuff)
        return result

    def gather_local(self, stuff: Any) -> list[Any] | None:
        if self._local_size == 1:
            return [stuff]
        result: list[Any] | None = self._connection.run("gather", LOCAL, stuff)
        return result

    def allgather(self, stuff: Any) -> list[Any]:
        result: list[Any] = self._connection.run("allgather", GLOBAL, stuff)
        return result

    def allgather_local(self, stuff: Any) -> list[Any]:
        if self._local_size == 1:
            return [stuff]
        result: list[Any] = self._connection.run("allgather", LOCAL, stuff)
        return result

    def broadcast(self, stuff: Any) -> Any:
        return self._connection.run("broadcast", GLOBAL, stuff)

    def broadcast_local(self, stuff: Any) -> Any:
        if self._local_size == 1:
            return stuff
        return self._connection.run("broadcast", LOCAL, stuff)

    def close(self) -> None:
        self._connection.close()


def _check_rank(name: str, rank: Any, size_name: str, size: Any) -> None:
    for label, value in ((size_name, size), (name, rank)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{label}: must be an integer, not {type(value).__name__}")
    if size < 1:
        raise ValueError(f"{size_name}: must be >= 1, not {size}")
    if not 0 <= rank < size:
        raise ValueError(f"{name}: must be in [0, {size_name}) = [0, {size}), not {rank}")


def _collectives_key(env: Mapping[str, str]) -> bytes:
    for name in KEY_ENVS:
        value = env.get(name, "")
        if value:
            return value.encode()
    log.info("no allocation token in the environment: the collectives hub accepts any peer that reaches it")
    return b""


def _env_port(env: Mapping[str, str]) -> int:
    raw = env.get(PORT_ENV, "").strip()
    if not raw:
        return DEFAULT_COLLECTIVES_PORT
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"{PORT_ENV}: must be a port number, not {raw!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"{PORT_ENV}: must be a port number from 1 to 65535, not {port}")
    return port


class DistributedContext:
    """Where this process stands among the trial's processes, and collectives among them.

    `rank`/`size` count all processes, `local_*` those on this node, `cross_*` the nodes. With
    `size > 1` the context connects to the chief's collectives hub at once (the chief starts it):
    `chief_ip` (required when `cross_size > 1`; default $CAIRN_CHIEF_IP or $DET_CHIEF_IP) and `port`
    (default $CAIRN_COLLECTIVES_PORT, else 30400).
    """

    def __init__(
        self,
        *,
        rank: int,
        size: int,
        local_rank: int,
        local_size: int,
        cross_rank: int,
        cross_size: int,
        chief_ip: str | None = None,
        port: int | None = None,
    ) -> None:
        _check_rank("rank", rank, "size", size)
        _check_rank("local_rank", local_rank, "local_size", local_size)
        _check_rank("cross_rank", cross_rank, "cross_size", cross_size)
        if local_size > size:
            raise ValueError(f"local_size: must be <= size ({size}), not {local_size}")
        env = os.environ
        chief_ip = chief_ip or env.get(tenv.CHIEF_IP) or env.get("DET_CHIEF_IP") or None
        if cross_size > 1 and not chief_ip:
            raise ValueError(
                f"chief_ip: required when the job spans machines (cross_size {cross_size}); "
                "pass it or set CAIRN_CHIEF_IP"
            )
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size
        # On one machine the chief is always reachable on loopback.
        self.chief_ip: str = chief_ip or "127.0.0.1"
        self._collectives: Collectives
        if size == 1:
            self._collectives = SingleProcessCollectives()
        else:
            member = Member(
                rank=rank, size=size, cross_rank=cross_rank, local_rank=local_rank, local_size=local_size
            )
            connection = TcpCollectives(
                member,
                self.chief_ip if cross_size > 1 else "127.0.0.1",
                port if port is not None else _env_port(env),
                _collectives_key(env),
            )
            self._collectives = HubCollectives(connection, local_size)
            log.info(
                "distributed context: rank %d of %d (local %d of %d, node %d of %d)",
                rank,
                size,
                local_rank,
                local_size,
                cross_rank,
                cross_size,
            )

    @classmethod
    def single(cls) -> DistributedContext:
        """Rank 0 of 1: what a one-process trial (and every off-cluster run) uses."""
        return cls(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)

    @classmethod
    def from_torch_distributed(cls, chief_ip: str | None = None) -> DistributedContext:
        """From the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
        GROUP_RANK, GROUP_WORLD_SIZE), as in Determined."""

        def number(name: str) -> int:
            raw = os.environ.get(name)
            if raw is None:
                raise ValueError(f"{name}: not set; is this process started by torchrun?")
            try:
                return int(raw)
            except ValueError:
                raise ValueError(f"{name}: must be an integer, not {raw!r}") from None

        return cls(
            rank=number("RANK"),
            size=number("WORLD_SIZE"),
            local_rank=number("LOCAL_RANK"),
            local_size=number("LOCAL_WORLD_SIZE"),
            cross_rank=number("GROUP_RANK"),
            cross_size=number("GROUP_WORLD_SIZE"),
            # torchrun's rendezvous host is the chief's machine.
            chief_ip=chief_ip or os.environ.get(tenv.CHIEF_IP) or os.environ.get("MASTER_ADDR"),
        )

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_local_chief(self) -> bool:
        return self.local_rank == 0

    def get_rank(self) -> int:
        return self.rank

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_size(self) -> int:
        return self.size

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    def get_num_agents(self) -> int:
        return self.cross_size

    def gather(self, stuff: Any) -> list[Any] | None:
        """Every process's `stuff`, in rank order, on the chief; None elsewhere."""
        return self._collectives.gather(stuff)

    def gather_local(self, stuff: Any) -> list[Any] | None:
        """Every `stuff` of this node, on the node's local chief; None elsewhere."""
        return self._collectives.gather_local(stuff)

    def allgather(self, stuff: Any) -> list[Any]:
        """Every process's `stuff`, in rank order, on every process."""
        return self._collectives.allgather(stuff)

    def allgather_local(self, stuff: Any) -> list[Any]:
        return self._collectives.allgather_local(stuff)

    def broadcast(self, stuff: Any) -> Any:
        """The chief's `stuff`, on every process."""
        return self._collectives.broadcast(stuff)

    def broadcast_local(self, stuff: Any) -> Any:
        """The local chief's `stuff`, on every process of the node."""
        return self._collectives.broadcast_local(stuff)

    def close(self) -> None:
        self._collectives.close()


class DummyDistributedContext(DistributedContext):
    """Determined's name for rank 0 of 1."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)
