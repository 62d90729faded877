"""Agents as the master knows them: registration (and reattachment of what they still run),
liveness, enable/disable, and the slots they offer."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import bindparam, select

from cairn.agent.v1 import agent_pb2 as apb
from services.common.logging import get_logger
from services.master.domain.allocations import containers, stops
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import FailedPrecondition, InvalidArgument, NotFound
from services.master.domain.kernel.states import AllocationState as A
from services.master.store import models

log = get_logger(__name__)

DEVICE_TYPE_NAMES = {
    apb.DEVICE_TYPE_CPU: "cpu",
    apb.DEVICE_TYPE_CUDA: "cuda",
    apb.DEVICE_TYPE_ROCM: "rocm",
}


@dataclass(frozen=True)
class Registration:
    keep_container_ids: list[str]
    acked_seq: dict[str, int]


def validate_hello(hello: apb.Hello, pools: list[str]) -> None:
    if not hello.agent_id:
        raise InvalidArgument("hello.agent_id: required")
    if hello.resource_pool not in pools:
        raise InvalidArgument(
            f"hello.resource_pool: no resource pool '{hello.resource_pool}' (pools: {', '.join(pools)})"
        )
    ids = [slot.id for slot in hello.slots]
    if len(ids) != len(set(ids)):
        raise InvalidArgument("hello.slots: slot ids must be unique")


# Reads of every agent's registration, built once.
_LIVE_CONTAINERS_ON = (
    select(models.Container)
    .join(models.Allocation, models.Allocation.id == models.Container.allocation_id)
    .where(
        models.Container.agent_id == bindparam("agent_id"),
        models.Container.state != A.TERMINATED,
        models.Allocation.state != A.TERMINATED,
    )
)
_SLOTS_OF = select(models.AgentSlot).where(models.AgentSlot.agent_id == bindparam("agent_id"))


def live_containers_on(w: Work, agent_id: str) -> list[models.Container]:
    return list(w.session.scalars(_LIVE_CONTAINERS_ON, {"agent_id": agent_id}))


def register(ctx: MasterContext, hello: apb.Hello) -> Registration:
    validate_hello(hello, [p.name for p in ctx.settings.pools])
    now = utcnow()
    with ctx.unit_of_work() as w:
        agent = w.session.get(models.Agent, hello.agent_id)
        live = live_containers_on(w, hello.agent_id)
        if agent is None:
            agent = models.Agent(
                id=hello.agent_id,
                resource_pool=hello.resource_pool,
                enabled=True,
                draining=False,
                registered_time=now,
                last_seen=now,
                connected=True,
            )
            w.session.add(agent)
        elif agent.resource_pool != hello.resource_pool and live:
            raise FailedPrecondition(
                f"agent {hello.agent_id} moved from pool '{agent.resource_pool}' to '{hello.resource_pool}' "
                "while it still runs work; restart it once its work has ended"
            )
        agent.resource_pool = hello.resource_pool
        agent.hostname = hello.hostname
        agent.addresses = list(hello.addresses)
        agent.version = hello.version
        agent.runtime = hello.runtime or "process"
        agent.last_seen = now
        agent.connected = True
        _sync_slots(ctx, w, hello)

        reported = {c.container_id for c in hello.containers}
        pending_start = ctx.hub.backlog_container_ids(hello.agent_id)
        keep: list[str] = []
        acked: dict[str, int] = {}
        for container in live:
            if container.id in reported or container.id in pending_start:
                keep.append(container.id)
                acked[container.id] = container.acked_seq
            else:
                log.warning(
                    "container gone on reattachment", agent_id=hello.agent_id, container_id=container.id
                )
                containers.fail_container_lost(ctx, w, container, "container is gone on reattachment")
        w.later(ctx.scheduler_wakeup.set)
    log.info(
        "agent registered",
        agent_id=hello.agent_id,
        slots=len(hello.slots),
        reconnect=hello.reconnect,
        kept=len(keep),
    )
    return Registration(keep_container_ids=keep, acked_seq=acked)


def _sync_slots(ctx: MasterContext, w: Work, hello: apb.Hello) -> None:
    existing = {slot.slot_id: slot for slot in w.session.scalars(_SLOTS_OF, {"agent_id": hello.agent_id})}
    for reported in hello.slots:
        slot = existing.pop(reported.id, None)
        if slot is None:
            slot = models.AgentSlot(
                agent_id=hello.agent_id, slot_id=reported.id, enabled=True, draining=False, unhealthy=""
            )
            w.session.add(slot)
        if slot.unhealthy and slot.uuid and reported.uuid != slot.uuid:
            # Slots are named by device index, which shifts when a GPU is gone: the fault was the
            # old device's. The slot stays out until an admin has seen what sits there now.
            slot.unhealthy = f"the device changed (was {slot.uuid}, unhealthy: {slot.unhealthy})"[
                :MAX_FAULT_REASON
            ]
        slot.device_type = DEVICE_TYPE_NAMES.get(reported.type, "cpu")
        slot.brand = reported.brand
        slot.uuid = reported.uuid
        slot.memory_bytes = reported.memory_bytes
        slot.device_index = reported.index
        slot.numa_node = reported.topology.numa_node if reported.HasField("topology") else -1
        slot.nvlink_domain = reported.topology.nvlink_domain if reported.HasField("topology") else -1
        if reported.HasField("fault"):
            note_fault(ctx, w, slot, reported.fault.reason, reported.fault.at.ToDatetime(tzinfo=UTC))
    for gone in existing.values():
        w.session.delete(gone)


def update_slots(ctx: MasterContext, agent_id: str, report: apb.SlotReport) -> None:
    with ctx.unit_of_work() as w:
        hello = apb.Hello(agent_id=agent_id, slots=report.slots)
        _sync_slots(ctx, w, hello)
        w.later(ctx.scheduler_wakeup.set)


# -- slot health ---------------------------------------------------------------------------------
# An agent reports a device fault with its slots (a GPU's critical Xid or uncorrected ECC error,
# services/agent/gpu_health.py). The slot goes out of service (disabled, with the reason) and what
# runs on it is stopped as the machine's failure (stops.stop_for_device): a trial or task runs
# again elsewhere without counting against its max_restarts. It stays out until an admin enables
# it (`det slot enable`). Each fault is acted on once, by its time: the agent reports its latest
# fault again in every Hello, and an admin's enable must not be undone by a reconnect.
MAX_FAULT_REASON = 500


def note_fault(ctx: MasterContext, w: Work, slot: models.AgentSlot, reason: str, at: datetime) -> bool:
    """Act on a fault the slot's agent reported, unless it was acted on before. True when acted on.

    The agent only ever reports a slot's latest fault, so a fault is new when its time differs
    from the one acted on (not only when it is later: a host can come back from a crash with its
    clock behind)."""
    if slot.fault_at is not None and slot.fault_at == at:
        return False
    slot.fault_at = at
    take_out_of_service(ctx, w, slot, (reason or "device fault")[:MAX_FAULT_REASON])
    return True


def take_out_of_service(ctx: MasterContext, w: Work, slot: models.AgentSlot, reason: str) -> None:
    """The slot is unhealthy (`reason`): it takes no new work until an admin enables it, and what
    runs on it stops as the machine's failure."""
    slot.unhealthy = reason
    slot.enabled = False
    slot.draining = False
    why = f"slot {slot.slot_id} of agent {slot.agent_id} is unhealthy: {reason}"
    for container in live_containers_on(w, slot.agent_id):
        if slot.slot_id in (container.slot_ids or []):
            stops.stop_for_device(ctx, w, w.session.get_one(models.Allocation, container.allocation_id), why)
    w.later(ctx.scheduler_wakeup.set)
    log.error(
        "slot out of service: its device failed", agent_id=slot.agent_id, slot_id=slot.slot_id, reason=reason
    )


def mark_disconnected(ctx: MasterContext, agent_id: str) -> None:
    with ctx.unit_of_work() as w:
        agent = w.session.get(models.Agent, agent_id)
        if agent is not None:
            agent.connected = False
            agent.last_seen = utcnow()
    log.info("agent disconnected", agent_id=agent_id)


def set_enabled(ctx: MasterContext, agent_id: str, enabled: bool, drain: bool = False) -> None:
    with ctx.unit_of_work() as w:
        agent = w.session.get(models.Agent, agent_id)
        if agent is None:
            raise NotFound(f"agent {agent_id} not found")
        change_enabled(ctx, w, agent, enabled, drain)
    log.info("agent enabled" if enabled else "agent disabled", agent_id=agent_id, drain=drain)


def change_enabled(ctx: MasterContext, w: Work, agent: models.Agent, enabled: bool, drain: bool) -> None:
    """Whether `agent` takes new work; disabled without draining, its work stops too."""
    agent.enabled = enabled
    agent.draining = (not enabled) and drain
    if not enabled and not drain:
        # Disabling without draining stops the agent's work; it is rescheduled elsewhere and,
        # being no fault of the code, does not count as a restart.
        for container in live_containers_on(w, agent.id):
            alloc = w.session.get_one(models.Allocation, container.allocation_id)
            stops.request_kill(
                ctx,
                w,
                alloc,
                grace_seconds=ctx.settings.kill_grace_s,
                reason=f"agent {agent.id} disabled",
            )
    w.later(ctx.scheduler_wakeup.set)


def set_slot_enabled(
    ctx: MasterContext, agent_id: str, slot_id: str, enabled: bool, drain: bool = False
) -> None:
    with ctx.unit_of_work() as w:
        slot = w.session.get(models.AgentSlot, (agent_id, slot_id))
        if slot is None:
            raise NotFound(f"slot {slot_id} of agent {agent_id} not found")
        slot.enabled = enabled
        slot.draining = (not enabled) and drain
        if enabled and slot.unhealthy:
            # An admin vouches for the device again (its fault stays noted: not acted on twice).
            log.info("unhealthy slot enabled", agent_id=agent_id, slot_id=slot_id, was=slot.unhealthy)
            slot.unhealthy = ""
        w.later(ctx.scheduler_wakeup.set)


def mark_all_disconnected_at_boot(ctx: MasterContext) -> None:
    """After a master restart no agent is connected yet; each gets the full reconnect window."""
    with ctx.db.transaction() as s:
        for agent in s.scalars(select(models.Agent)):
            agent.connected = False
            agent.last_seen = utcnow()
