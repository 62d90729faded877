"""Conversions between the agent's own types and the AgentService proto messages."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from cairn.agent.v1 import agent_pb2 as apb
from services.agent.containers.outbox import Delivery
from services.agent.gpu_health import SlotFault
from services.agent.requests import ContainerReport, MountRequest, RendezvousInfo, RunAsRequest, StartRequest
from services.agent.runtime.events import LogEvent, StateEvent
from services.agent.slots import DeviceKind, SlotInfo

_DEVICE_TYPES = {DeviceKind.CPU: apb.DEVICE_TYPE_CPU, DeviceKind.CUDA: apb.DEVICE_TYPE_CUDA}
_STATES = {
    "ASSIGNED": apb.CONTAINER_STATE_ASSIGNED,
    "PULLING": apb.CONTAINER_STATE_PULLING,
    "STARTING": apb.CONTAINER_STATE_STARTING,
    "RUNNING": apb.CONTAINER_STATE_RUNNING,
    "TERMINATED": apb.CONTAINER_STATE_TERMINATED,
}
_FAILURES = {
    "": apb.FAILURE_TYPE_UNSPECIFIED,
    "CONTAINER_FAILED": apb.FAILURE_TYPE_CONTAINER_FAILED,
    "CONTAINER_ABORTED": apb.FAILURE_TYPE_CONTAINER_ABORTED,
    "TASK_ERROR": apb.FAILURE_TYPE_TASK_ERROR,
    "AGENT_FAILED": apb.FAILURE_TYPE_AGENT_FAILED,
    "KILLED": apb.FAILURE_TYPE_KILLED,
    "DEVICE_FAILED": apb.FAILURE_TYPE_DEVICE_FAILED,
}


def timestamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def slot_message(slot: SlotInfo, fault: SlotFault | None = None) -> apb.Slot:
    message = apb.Slot(
        id=slot.id,
        type=_DEVICE_TYPES[slot.kind],
        brand=slot.brand,
        uuid=slot.uuid,
        memory_bytes=slot.memory_bytes,
        index=slot.index,
        topology=apb.DeviceTopology(numa_node=slot.numa_node, nvlink_domain=slot.nvlink_domain),
    )
    if fault is not None:
        message.fault.reason = fault.reason
        message.fault.at.CopyFrom(timestamp(fault.at))
    return message


def running_container(report: ContainerReport) -> apb.RunningContainer:
    message = apb.RunningContainer(
        container_id=report.container_id,
        allocation_id=report.allocation_id,
        state=_STATES[report.state],
        slot_ids=list(report.slot_ids),
    )
    if report.exit_code is not None:
        message.exit_code = report.exit_code
    if report.started_at is not None:
        message.started_at.CopyFrom(timestamp(report.started_at))
    return message


def delivery_message(delivery: Delivery) -> apb.AgentMessage:
    first = delivery.events[0]
    if isinstance(first, StateEvent):
        state = apb.ContainerStateChanged(
            container_id=delivery.container_id,
            allocation_id=delivery.allocation_id,
            state=_STATES[first.state],
            failure_type=_FAILURES.get(first.failure, apb.FAILURE_TYPE_UNSPECIFIED),
            message=first.message,
            time=timestamp(first.time),
            seq=first.seq,
        )
        if first.exit_code is not None:
            state.exit_code = first.exit_code
        return apb.AgentMessage(container_state=state)
    entries = []
    for event in delivery.events:
        assert isinstance(event, LogEvent)
        entry = apb.LogEntry(
            container_id=delivery.container_id,
            allocation_id=delivery.allocation_id,
            seq=event.seq,
            timestamp=timestamp(event.time),
            stdtype=event.stdtype,
            message=event.message,
            level=event.level,
            source=event.source,
        )
        if event.rank is not None:
            entry.rank = event.rank
        entries.append(entry)
    return apb.AgentMessage(log_batch=apb.LogBatch(entries=entries))


def rendezvous_info(start: apb.StartContainer) -> RendezvousInfo | None:
    if not start.HasField("rendezvous"):
        return None
    r = start.rendezvous
    return RendezvousInfo(
        container_addrs=tuple(r.container_addrs),
        container_slot_counts=tuple(r.container_slot_counts),
        container_rank=r.container_rank,
        c10d_port=r.c10d_port,
        collectives_port=r.collectives_port,
        det_pub_port=r.det_pub_port,
        det_pull_port=r.det_pull_port,
    )


def start_request(start: apb.StartContainer) -> StartRequest:
    spec = start.spec
    return StartRequest(
        container_id=start.container_id,
        allocation_id=start.allocation_id,
        slot_ids=tuple(start.slot_ids),
        entrypoint=tuple(spec.entrypoint),
        shell=spec.shell,
        environment=dict(spec.environment),
        runtime=spec.runtime or "process",
        image=spec.image,
        kill_grace_seconds=spec.kill_grace_seconds,
        has_context=spec.has_context,
        context_digest=spec.context_digest,
        mounts=tuple(MountRequest(m.host_path, m.container_path, m.read_only) for m in spec.mounts),
        description=spec.description,
        rendezvous=rendezvous_info(start),
        container_config=spec.container_config,
        after_container_ids=tuple(start.after_container_ids),
        run_as=RunAsRequest(spec.run_as.uid, spec.run_as.gid, spec.run_as.user, spec.run_as.group)
        if spec.HasField("run_as")
        else None,
    )
