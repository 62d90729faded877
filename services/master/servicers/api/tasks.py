"""Tasks of every kind: the live allocations, as Determined's task list shows them."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from cairn.api.v1 import task_pb2
from services.master.domain.metrics import signals
from services.master.domain.reads.tasks import live_allocations
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc, stream_rpc


class TasksApi(ServicerBase):
    @rpc
    def GetTasks(
        self, request: task_pb2.GetTasksRequest, context: grpc.ServicerContext
    ) -> task_pb2.GetTasksResponse:
        response = task_pb2.GetTasksResponse()
        with self.ctx.db.read() as s:
            rows = live_allocations(s)
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
