"""How the containers of one allocation find each other: their addresses and slot counts by rank,
and a block of ports their processes meet on.

Determined gives each container its own network namespace, so its fixed ports (torch's c10d store
on 29400, its DistributedContext on 12360/12361) never collide. Cairn's containers share the host's
network, so two multi-process trials on one machine would. The master therefore hands every live
allocation its own port offset, and each meeting port is a base plus that offset: the ranges sit
below Linux's ephemeral ports (32768+) and do not overlap one another. A cluster's offsets are
turned by a shift of its own (from its cluster id): two clusters on one machine (a local cluster
beside another, the test suite's clusters side by side) would otherwise both give their first
allocation the first block, and the second trial's c10d store would find its port taken.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from cairn.agent.v1 import agent_pb2 as apb

# Offsets 0 .. PORT_BLOCKS-1. Past that many live allocations, offsets are shared (modulo), which
# only matters for allocations that also share a machine.
PORT_BLOCKS = 1000
C10D_PORT_BASE = 29400  # Determined's C10D_PORT default; ends at 30399
COLLECTIVES_PORT_BASE = 30400  # Cairn's core.distributed; ends at 31399
DET_IPC_PORT_BASE = 12360  # Determined's INTER_TRAIN_PROCESS_COMM_PORT_1/_2, two per block; ends at 14359

# Where a container reaches another on the same machine when its agent advertised no address.
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Ports:
    c10d: int
    collectives: int
    det_pub: int
    det_pull: int


def cluster_port_shift(cluster_id: str) -> int:
    """Where a cluster's port blocks start (a turn of all of them, so its allocations' blocks stay
    distinct from one another); the same for every master of the cluster and across restarts."""
    return int.from_bytes(hashlib.sha256(cluster_id.encode()).digest()[:8], "big") % PORT_BLOCKS


def ports_for(offset: int, shift: int = 0) -> Ports:
    block = (offset + shift) % PORT_BLOCKS
    return Ports(
        c10d=C10D_PORT_BASE + block,
        collectives=COLLECTIVES_PORT_BASE + block,
        det_pub=DET_IPC_PORT_BASE + 2 * block,
        det_pull=DET_IPC_PORT_BASE + 2 * block + 1,
    )


def free_port_offset(counts: Sequence[int]) -> int:
    """The lowest offset no live allocation holds (then the least shared one, past PORT_BLOCKS),
    given how many hold each block."""
    fewest = min(counts)
    return counts.index(fewest)


def agent_address(addresses: Sequence[str]) -> str:
    """Where other containers reach this agent's containers: the address it advertised first."""
    return next((a for a in addresses if a), LOOPBACK)


def rendezvous_for(
    container_addrs: Sequence[str], slot_counts: Sequence[int], rank: int, offset: int, shift: int = 0
) -> apb.Rendezvous:
    ports = ports_for(offset, shift)
    # On one machine every container is local: loopback works whatever the agents advertised.
    addrs = list(container_addrs) if len(set(container_addrs)) > 1 else [LOOPBACK] * len(container_addrs)
    return apb.Rendezvous(
        container_addrs=addrs,
        container_slot_counts=list(slot_counts),
        container_rank=rank,
        c10d_port=ports.c10d,
        collectives_port=ports.collectives,
        det_pub_port=ports.det_pub,
        det_pull_port=ports.det_pull,
    )
