"""Tasks of every kind: the live allocations, as Determined's task list shows them; one task with
its allocations, and an allocation's report that its service answers (the routes the stock client
waits on)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc

from cairn.api.v1 import notebook_pb2 as npb
from cairn.api.v1 import task_pb2
from services.master.domain.allocations import task_services
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.kernel.states import TaskKind, TaskState
from services.master.domain.metrics import signals
from services.master.domain.reads import tasks as reads
from services.master.domain.reads.tasks import live_allocations
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc, stream_rpc
from services.master.store import models

State = task_pb2.Allocation.State
# An allocation's state as Determined's task states name it (a pending one is QUEUED).
ALLOCATION_STATES = {
    A.PENDING: State.STATE_QUEUED,
    A.ASSIGNED: State.STATE_STARTING,
    A.PULLING: State.STATE_PULLING,
    A.STARTING: State.STATE_STARTING,
    A.RUNNING: State.STATE_RUNNING,
    A.TERMINATING: State.STATE_TERMINATING,
    A.TERMINATED: State.STATE_TERMINATED,
}


GenericState = npb.GenericTaskState
# A generic task's state as Determined's GenericTaskState names it (Cairn has no STOPPING_COMPLETED
# or STOPPING_ERROR: a task's own end is recorded when its allocation ends, never asked for).
GENERIC_TASK_STATES = {
    TaskState.ACTIVE: GenericState.GENERIC_TASK_STATE_ACTIVE,
    TaskState.STOPPING_PAUSED: GenericState.GENERIC_TASK_STATE_STOPPING_PAUSED,
    TaskState.PAUSED: GenericState.GENERIC_TASK_STATE_PAUSED,
    TaskState.STOPPING_CANCELED: GenericState.GENERIC_TASK_STATE_STOPPING_CANCELED,
    TaskState.COMPLETED: GenericState.GENERIC_TASK_STATE_COMPLETED,
    TaskState.CANCELED: GenericState.GENERIC_TASK_STATE_CANCELED,
    TaskState.ERROR: GenericState.GENERIC_TASK_STATE_ERROR,
}


def _task_message(task: models.Task, allocations: list[models.Allocation]) -> npb.Task:
    """Determined's Task: the generic-task fields (state, no_pause, config) only on a generic task,
    unset (null on the wire) on every other kind, as Determined's tasks table keeps them."""
    message = npb.Task(
        task_id=task.id,
        task_type=npb.TaskType.Value(f"TASK_TYPE_{task.kind}"),
        start_time=convert.ts(task.start_time),
        end_time=convert.ts(task.end_time),
        allocations=[_allocation_message(a) for a in allocations],
    )
    if task.parent_id:
        message.parent_id = task.parent_id
    if task.forked_from:
        message.forked_from = task.forked_from
    if task.kind == TaskKind.GENERIC:
        message.task_state = GENERIC_TASK_STATES[TaskState(task.state)]
        message.no_pause = bool(task.no_pause)
        message.config = json.dumps(task.config or {})
    return message


def _allocation_message(alloc: models.Allocation) -> task_pb2.Allocation:
    message = task_pb2.Allocation(
        task_id=alloc.task_id,
        allocation_id=alloc.id,
        state=ALLOCATION_STATES[A(alloc.state)],
        is_ready=bool(alloc.is_ready),
        slots=alloc.slots,
        start_time=convert.ts(alloc.start_time),
        end_time=convert.ts(alloc.end_time),
    )
    if alloc.exit_reason:
        message.exit_reason = alloc.exit_reason
    if alloc.exit_code is not None:
        message.status_code = alloc.exit_code
    return message


class TasksApi(ServicerBase):
    @rpc
    def GetTasks(
        self, request: task_pb2.GetTasksRequest, context: grpc.ServicerContext
    ) -> task_pb2.GetTasksResponse:
        response = task_pb2.GetTasksResponse()
        nsc = self.readable(context, Permission.VIEW_NSC)
        experiments = self.readable(context, Permission.VIEW_EXPERIMENT_METADATA)
        with self.ctx.db.read() as s:
            rows = live_allocations(s, nsc, experiments)
            proxy_ports = reads.trial_proxy_ports(s, (task for _, task in rows))
        for alloc, task in rows:
            summary = task_pb2.AllocationSummary(
                task_id=task.id,
                allocation_id=alloc.id,
                name=task.description,
                registered_time=convert.ts(alloc.requested_at),
                resource_pool=alloc.resource_pool,
                slots_needed=alloc.slots,
                scheduler_type="priority",
            )
            if alloc.priority is not None:
                summary.priority = alloc.priority
            served = task_services.served_port(self.ctx, task, alloc)
            if served is not None:
                summary.proxy_ports.append(
                    task_pb2.ProxyPortConfig(
                        service_id=served.service_id,
                        port=served.port,
                        proxy_tcp=served.tcp,
                        unauthenticated=served.unauthenticated,
                    )
                )
            for port in proxy_ports.get(task.id, ()):
                summary.proxy_ports.append(
                    task_pb2.ProxyPortConfig(
                        service_id=f"{task.id}:{port.port}",
                        port=port.port,
                        proxy_tcp=port.tcp,
                        unauthenticated=port.unauthenticated,
                    )
                )
            for rank, placement in enumerate(alloc.placements):
                resources = task_pb2.ResourcesSummary(
                    resources_id=f"{alloc.id}.{rank}",
                    resources_type="DockerContainer",
                    allocation_id=alloc.id,
                    container_id=f"{alloc.id}.{rank}",
                )
                resources.agent_devices[placement["agent_id"]].devices.extend(
                    str(x) for x in placement.get("slot_ids", [])
                )
                summary.resources.append(resources)
            response.allocation_id_to_summary[alloc.id].CopyFrom(summary)
        return response

    @rpc
    def GetTask(self, request: npb.GetTaskRequest, context: grpc.ServicerContext) -> npb.GetTaskResponse:
        principal = self.user(context)
        with self.ctx.db.read() as s:
            task = reads.task(s, request.task_id)
            access.check_task_readable(s, principal, task)
            allocations = reads.allocations_of_task(s, task.id)
            message = _task_message(task, allocations)
        return npb.GetTaskResponse(task=message)

    @rpc
    def AllocationReady(
        self, request: npb.AllocationReadyRequest, context: grpc.ServicerContext
    ) -> npb.AllocationReadyResponse:
        task_services.report_ready(self.ctx, self.caller(context), request.allocation_id)
        return npb.AllocationReadyResponse()


class SignalsApi(ServicerBase):
    """Preemption signals for trial code: Determined's long poll and Cairn's push stream."""

    @rpc
    def AllocationPreemptionSignal(
        self, request: task_pb2.AllocationPreemptionSignalRequest, context: grpc.ServicerContext
    ) -> task_pb2.AllocationPreemptionSignalResponse:
        preempt = signals.wait_preemption(
            self.ctx,
            self.caller(context),
            request.allocation_id,
            float(request.timeout_seconds),
            self.deps.signal_wait_slots.hold,
        )
        return task_pb2.AllocationPreemptionSignalResponse(preempt=preempt)

    @rpc
    def AckAllocationPreemptionSignal(
        self, request: task_pb2.AckAllocationPreemptionSignalRequest, context: grpc.ServicerContext
    ) -> task_pb2.AckAllocationPreemptionSignalResponse:
        signals.ack_preemption(self.ctx, self.caller(context), request.allocation_id)
        return task_pb2.AckAllocationPreemptionSignalResponse()

    @rpc
    def NotifyAllocationExiting(
        self, request: task_pb2.NotifyAllocationExitingRequest, context: grpc.ServicerContext
    ) -> task_pb2.NotifyAllocationExitingResponse:
        released = signals.notify_exiting(self.ctx, self.caller(context), request.allocation_id)
        return task_pb2.NotifyAllocationExitingResponse(released=released)

    @stream_rpc
    def WatchAllocationSignals(
        self, request: task_pb2.WatchAllocationSignalsRequest, context: grpc.ServicerContext
    ) -> Iterator[task_pb2.AllocationSignal]:
        first = True
        previous: signals.SignalState | None = None
        for state in signals.watch(
            self.ctx,
            self.caller(context),
            request.allocation_id,
            context.is_active,
            self.deps.signal_wait_slots.hold,
        ):
            if first:
                kind = task_pb2.AllocationSignal.KIND_STATE
            elif state.preempt and (previous is None or not previous.preempt):
                kind = task_pb2.AllocationSignal.KIND_PREEMPT
            elif previous is not None and state.searcher_target != previous.searcher_target:
                kind = task_pb2.AllocationSignal.KIND_SEARCHER_TARGET
            else:
                kind = task_pb2.AllocationSignal.KIND_STATE
            first = False
            previous = state
            yield task_pb2.AllocationSignal(
                kind=kind, preempt=state.preempt, searcher_target=state.searcher_target, reason=state.reason
            )
