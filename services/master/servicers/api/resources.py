"""Allocation accounting (Determined's historical cluster usage): the raw and aggregated reads, as
JSON under /api/v1/resources/allocation/ and as Determined's CSV files under
/resources/allocation/. Every signed-in user may read them, as on Determined without RBAC."""

from __future__ import annotations

import grpc
from google.api import httpbody_pb2  # type: ignore[import-untyped]

from cairn.api.v1 import resources_pb2 as rpb
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.reads import allocation_usage as usage
from services.master.servicers.api import allocation_csv, convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc

PERIOD = rpb.ResourceAllocationAggregationPeriod
CSV_CONTENT_TYPE = "text/csv"


def _csv(data: bytes) -> httpbody_pb2.HttpBody:
    return httpbody_pb2.HttpBody(content_type=CSV_CONTENT_TYPE, data=data)


class ResourcesApi(ServicerBase):
    @rpc
    def ResourceAllocationRaw(
        self, request: rpb.ResourceAllocationRawRequest, context: grpc.ServicerContext
    ) -> rpb.ResourceAllocationRawResponse:
        self.user(context)
        return self._raw(request)

    @rpc
    def ResourceAllocationRawCsv(
        self, request: rpb.ResourceAllocationRawRequest, context: grpc.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        self.user(context)
        return _csv(allocation_csv.raw_csv(self._raw(request)))

    def _raw(self, request: rpb.ResourceAllocationRawRequest) -> rpb.ResourceAllocationRawResponse:
        after, before = usage.raw_range(request.timestamp_after, request.timestamp_before)
        now = utcnow()
        with self.ctx.db.read() as s:
            usages = usage.allocations_between(s, after, before)
        return rpb.ResourceAllocationRawResponse(
            resource_entries=[
                rpb.ResourceAllocationRawEntry(
                    kind=u.task_type,
                    start_time=convert.ts(u.start_time),
                    end_time=convert.ts(u.end_time),
                    experiment_id=u.experiment_id,
                    username=u.username,
                    user_id=u.user_id,
                    labels=list(u.labels),
                    seconds=u.seconds_within(after, before, now),
                    slots=u.slots,
                )
                for u in usages
            ]
        )

    @rpc
    def ResourceAllocationAggregated(
        self, request: rpb.ResourceAllocationAggregatedRequest, context: grpc.ServicerContext
    ) -> rpb.ResourceAllocationAggregatedResponse:
        self.user(context)
        return self._aggregated(request)

    @rpc
    def ResourceAllocationAggregatedCsv(
        self, request: rpb.ResourceAllocationAggregatedRequest, context: grpc.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        self.user(context)
        return _csv(allocation_csv.aggregated_csv(self._aggregated(request)))

    def _aggregated(
        self, request: rpb.ResourceAllocationAggregatedRequest
    ) -> rpb.ResourceAllocationAggregatedResponse:
        if request.period not in (
            PERIOD.RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY,
            PERIOD.RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY,
        ):
            raise InvalidArgument("period: RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY or _MONTHLY required")
        monthly = request.period == PERIOD.RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY
        starts = usage.period_starts(request.start_date, request.end_date, monthly)
        with self.ctx.db.read() as s:
            periods = usage.aggregated(s, starts, monthly, utcnow())
        return rpb.ResourceAllocationAggregatedResponse(
            resource_entries=[
                rpb.ResourceAllocationAggregatedEntry(
                    period_start=p.start.isoformat(),
                    period=request.period,
                    seconds=p.seconds,
                    by_username=dict(p.by_username),
                    by_experiment_label=dict(p.by_experiment_label),
                    by_resource_pool=dict(p.by_resource_pool),
                )
                for p in periods
            ]
        )

    @rpc
    def AllocationsCsv(
        self, request: rpb.AllocationsCsvRequest, context: grpc.ServicerContext
    ) -> httpbody_pb2.HttpBody:
        self.user(context)
        after, before = usage.raw_range(request.timestamp_after, request.timestamp_before)
        with self.ctx.db.read() as s:
            usages = usage.allocations_between(s, after, before)
        return _csv(allocation_csv.allocations_csv(usages, after, before, utcnow()))
