"""`core.distributed`: the ranks of a trial's processes and collectives between them (Determined's
DistributedContext).

Cairn runs one process per trial for now. The collectives sit behind `Collectives`, so that an
implementation that moves objects between processes can take the place of the single-process one
without changing the context's surface.
"""

from __future__ import annotations

import abc
import os
from typing import Any


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


def _check_rank(name: str, rank: Any, size_name: str, size: Any) -> None:
    for label, value in ((size_name, size), (name, rank)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{label}: must be an integer, not {type(value).__name__}")
    if size < 1:
        raise ValueError(f"{size_name}: must be >= 1, not {size}")
    if not 0 <= rank < size:
        raise ValueError(f"{name}: must be in [0, {size_name}) = [0, {size}), not {rank}")


def collectives_for(size: int) -> Collectives:
    if size == 1:
        return SingleProcessCollectives()
    raise NotImplementedError(
        f"multi-slot trials are not supported yet: a DistributedContext of size {size} needs collectives "
        "between processes, which Cairn's Core API does not have yet; run one process per trial "
        "(resources.slots_per_trial: 1, or one process using all of its slots)"
    )


class DistributedContext:
    """Where this process stands among the trial's processes, and collectives among them.

    `rank`/`size` count all processes, `local_*` those on this node, `cross_*` the nodes.
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
    ) -> None:
        _check_rank("rank", rank, "size", size)
        _check_rank("local_rank", local_rank, "local_size", local_size)
        _check_rank("cross_rank", cross_rank, "cross_size", cross_size)
        if local_size > size:
            raise ValueError(f"local_size: must be <= size ({size}), not {local_size}")
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size
        self.chief_ip = chief_ip
        self._collectives = collectives_for(size)

    @classmethod
    def single(cls) -> DistributedContext:
        """Rank 0 of 1: what a one-process trial (and every off-cluster run) uses."""
        return cls(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)

    @classmethod
    def from_torch_distributed(cls, chief_ip: str | None = None) -> DistributedContext:
        """From the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, ...)."""

        def number(name: str) -> int:
            raw = os.environ.get(name)
            if raw is None:
                raise ValueError(f"{name}: not set; is this process started by torchrun?")
            return int(raw)

        return cls(
            rank=number("RANK"),
            size=number("WORLD_SIZE"),
            local_rank=number("LOCAL_RANK"),
            local_size=number("LOCAL_WORLD_SIZE"),
            cross_rank=number("GROUP_RANK"),
            cross_size=number("GROUP_WORLD_SIZE"),
            chief_ip=chief_ip or os.environ.get("MASTER_ADDR"),
        )

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

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
