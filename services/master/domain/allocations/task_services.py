"""Tasks that serve something through the master's proxy (the kinds whose description says so:
notebooks, TensorBoards, shells): the port and host their service listens on, what else their kind
tells them, and where the master's proxy reaches them once they are ready.

The port: Determined gives each task container its own network namespace and a fixed port through
its environment (NOTEBOOK_PORT). Cairn's process runtime shares the host's network, so a fixed port
would collide between two notebooks on one machine. The master already gives every live allocation
its own port offset (rendezvous.py); the service port is SERVICE_PORT_BASE plus that offset, handed
to the task through its environment. So the master knows the port before the task starts, no task
has to find and report a free port, and the address survives a master restart in the allocation's
row (proxy_address).

The host: where the master reaches the agent, the agent's --advertise-address (the first address
of its Hello), loopback when it advertised none. The service binds there and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

import cairn.task_environment as tenv
from cairn.agent.v1 import agent_pb2 as apb
from services.common.principal import Principal
from services.master.domain.allocations.rendezvous import PORT_BLOCKS, agent_address, cluster_port_shift
from services.master.domain.identity import allocation_access
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import PermissionDenied
from services.master.domain.kernel.topics import allocation_topic, task_topic
from services.master.domain.task_kinds import registry
from services.master.domain.task_kinds.kind import Proxy
from services.master.store import models

# Above the collectives' ports (ends at 31399) and below Linux's ephemeral ports (32768+).
SERVICE_PORT_BASE = 31400  # ends at 32399


def service_port(ctx: MasterContext, port_offset: int) -> int:
    """The allocation's service port: its block, turned by the cluster's shift (rendezvous.py)."""
    return SERVICE_PORT_BASE + (port_offset + cluster_port_shift(ctx.cluster_id)) % PORT_BLOCKS


@dataclass(frozen=True)
class ServedPort:
    """A port an allocation serves through the master's proxy, as Determined's ProxyPortConfig
    tells it (GetTasks' proxy_ports, which `det task list` shows as Ports)."""

    service_id: str
    port: int
    tcp: bool
    unauthenticated: bool


def served_port(ctx: MasterContext, task: models.Task, alloc: models.Allocation) -> ServedPort | None:
    """The port a serving task's allocation serves, as Determined lists a notebook's, TensorBoard's
    or shell's: its default service, so the proxy names it by the task's id; a shell's is a TCP
    stream reached without a session (its SSH key is the credential), as Determined marks it. None
    for a kind that serves nothing, and until the allocation is placed: its port comes from the
    port block the master gives it then (Determined picks a notebook's port at launch)."""
    proxy = registry.proxy_of(task.kind)
    if proxy == Proxy.NONE or alloc.port_offset is None:
        return None
    tcp = proxy == Proxy.TCP
    return ServedPort(
        service_id=task.id, port=service_port(ctx, alloc.port_offset), tcp=tcp, unauthenticated=tcp
    )


def service_host(w: Work, alloc: models.Allocation) -> str:
    """The address of the agent that runs the allocation's first container."""
    placements = alloc.placements or []
    if not placements:
        return agent_address([])
    agent_id = str(placements[0]["agent_id"])
    addresses = w.session.scalar(select(models.Agent.addresses).where(models.Agent.id == agent_id))
    return agent_address(addresses or [])


def service_environment(
    ctx: MasterContext, w: Work, task: models.Task, alloc: models.Allocation
) -> dict[str, str]:
    """What a serving task is told: where to listen, and what its kind adds; nothing for a kind
    that serves nothing."""
    kind = registry.description(task.kind)
    if not kind.serves or alloc.port_offset is None:
        return {}
    port = str(service_port(ctx, alloc.port_offset))
    env = {tenv.SERVICE_HOST: service_host(w, alloc), tenv.SERVICE_PORT: port}
    env.update(kind.environment(w, task, port))
    return env


def service_mounts(w: Work, task: models.Task) -> list[apb.Mount]:
    """What a task's kind must see of the host (a TensorBoard its trials' shared_fs storage)."""
    return registry.description(task.kind).mounts(w, task)


def check_may_report_ready(principal: Principal, alloc: models.Allocation) -> None:
    """Only the allocation's own processes (its token) or the cluster itself say it is ready."""
    if principal.internal or principal.allocation_id == alloc.id:
        return
    raise PermissionDenied(
        f"allocation_id: only allocation {alloc.id}'s own processes may report that it is ready"
    )


def mark_ready(ctx: MasterContext, w: Work, alloc: models.Allocation) -> None:
    """The allocation's service answers: it is ready, and a serving task's proxy address is
    recorded (the master's proxy reads it from here, across restarts)."""
    task = w.session.get_one(models.Task, alloc.task_id)
    if registry.proxy_of(task.kind) != Proxy.NONE and alloc.port_offset is not None:
        alloc.proxy_address = f"{service_host(w, alloc)}:{service_port(ctx, alloc.port_offset)}"
    alloc.is_ready = True
    topics = (allocation_topic(alloc.id), task_topic(alloc.task_id))

    def publish() -> None:
        for topic in topics:
            ctx.topics.publish(topic)

    w.later(publish)


def report_ready(ctx: MasterContext, principal: Principal, allocation_id: str) -> None:
    """AllocationReady: the allocation's own process says its service answers."""
    with ctx.unit_of_work() as w:
        alloc = allocation_access.live_allocation(w.session, allocation_id)
        check_may_report_ready(principal, alloc)
        if not alloc.is_ready:
            mark_ready(ctx, w, alloc)
