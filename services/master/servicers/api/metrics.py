"""Trial reporting (metrics, progress, early exit, searcher operations) and reading metrics back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC

import grpc
from sqlalchemy import select

from cairn.api.v1 import trial_pb2 as tpb
from cairn.wire import struct_to_python
from services.master.domain import metrics, signals
from services.master.domain.downsample import downsample
from services.master.domain.errors import InvalidArgument, NotFound
from services.master.domain.queries import smaller_is_better
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc, stream_rpc
from services.master.store import models

REPORTS_PER_MESSAGE = 1000
EARLY_EXIT_NAMES = {
    tpb.TrialEarlyExit.EXITED_REASON_INVALID_HP: "INVALID_HP",
    tpb.TrialEarlyExit.EXITED_REASON_INIT_INVALID_HP: "INIT_INVALID_HP",
    tpb.TrialEarlyExit.EXITED_REASON_USER_REQUESTED_STOP: "USER_REQUESTED_STOP",
}


class MetricsApi(ServicerBase):
    @rpc
    def ReportTrialMetrics(
        self, request: tpb.ReportTrialMetricsRequest, context: grpc.ServicerContext
    ) -> tpb.ReportTrialMetricsResponse:
        m = request.metrics
        if not m.HasField("steps_completed"):
            raise InvalidArgument("metrics.steps_completed: required")
        report = metrics.Report(
            group=request.group,
            steps_completed=m.steps_completed,
            metrics=struct_to_python(m.metrics.avg_metrics),
            report_time=m.report_time.ToDatetime(UTC) if m.HasField("report_time") else None,
            batch_metrics=[struct_to_python(b) for b in m.metrics.batch_metrics] or None,
        )
        metrics.report(self.ctx, self.caller(context), m.trial_id, m.trial_run_id, [report])
        return tpb.ReportTrialMetricsResponse()

    @rpc
    def ReportTrialMetricsBatch(
        self, request: tpb.ReportTrialMetricsBatchRequest, context: grpc.ServicerContext
    ) -> tpb.ReportTrialMetricsBatchResponse:
        reports = [
            metrics.Report(
                group=r.group,
                steps_completed=r.steps_completed,
                metrics=struct_to_python(r.metrics),
                report_time=r.report_time.ToDatetime(UTC) if r.HasField("report_time") else None,
                batch_metrics=[struct_to_python(b) for b in r.batch_metrics] or None,
                seq=r.seq,
            )
            for r in request.reports
        ]
        result = metrics.report(
            self.ctx, self.caller(context), request.trial_id, request.trial_run_id, reports
        )
        return tpb.ReportTrialMetricsBatchResponse(
            stored=result.stored, duplicates=result.duplicates, max_stored_seq=result.max_stored_seq
        )

    @stream_rpc
    def GetMetrics(
        self, request: tpb.GetMetricsRequest, context: grpc.ServicerContext
    ) -> Iterator[tpb.GetMetricsResponse]:
        if not request.trial_ids:
            raise InvalidArgument("trial_ids: required")
        group = request.group or "training"
        for trial_id in request.trial_ids:
            with self.ctx.db.read() as s:
                rows = list(
                    s.scalars(
                        select(models.Metric)
                        .where(
                            models.Metric.trial_id == trial_id,
                            models.Metric.group_name == group,
                            models.Metric.archived.is_(False),
                        )
                        .order_by(models.Metric.steps_completed, models.Metric.id)
                    )
                )
            if request.max_datapoints > 0:
                rows = downsample(rows, request.max_datapoints)
            for start in range(0, len(rows), REPORTS_PER_MESSAGE):
                yield tpb.GetMetricsResponse(
                    metrics=[
                        tpb.MetricsReport(
                            trial_id=row.trial_id,
                            end_time=convert.ts(row.report_time),
                            metrics=convert.struct(
                                {"avg_metrics": row.metrics, "batch_metrics": row.batch_metrics}
                            ),
                            total_batches=int(row.steps_completed),
                            archived=row.archived,
                            id=int(row.id),
                            trial_run_id=row.trial_run_id,
                            group=row.group_name,
                        )
                        for row in rows[start : start + REPORTS_PER_MESSAGE]
                    ]
                )

    @rpc
    def ReportTrialProgress(
        self, request: tpb.ReportTrialProgressRequest, context: grpc.ServicerContext
    ) -> tpb.ReportTrialProgressResponse:
        metrics.report_progress(self.ctx, self.caller(context), request.trial_id, request.progress)
        return tpb.ReportTrialProgressResponse()

    @rpc
    def ReportTrialSearcherEarlyExit(
        self, request: tpb.ReportTrialSearcherEarlyExitRequest, context: grpc.ServicerContext
    ) -> tpb.ReportTrialSearcherEarlyExitResponse:
        reason = EARLY_EXIT_NAMES.get(request.early_exit.reason)
        if reason is None:
            raise InvalidArgument("early_exit.reason: required")
        metrics.report_early_exit(self.ctx, self.caller(context), request.trial_id, reason)
        return tpb.ReportTrialSearcherEarlyExitResponse()

    @rpc
    def GetCurrentTrialSearcherOperation(
        self, request: tpb.GetCurrentTrialSearcherOperationRequest, context: grpc.ServicerContext
    ) -> tpb.GetCurrentTrialSearcherOperationResponse:
        request_id, length, completed = signals.current_operation(self.ctx, request.trial_id)
        response = tpb.GetCurrentTrialSearcherOperationResponse(completed=completed)
        if length > 0:
            response.op.validate_after.request_id = request_id
            response.op.validate_after.length = length
        return response

    @rpc
    def CompleteTrialSearcherValidation(
        self, request: tpb.CompleteTrialSearcherValidationRequest, context: grpc.ServicerContext
    ) -> tpb.CompleteTrialSearcherValidationResponse:
        signals.complete_operation(
            self.ctx, request.trial_id, int(request.completed_operation.validate_after.length)
        )
        return tpb.CompleteTrialSearcherValidationResponse()

    @rpc
    def GetBestSearcherValidationMetric(
        self, request: tpb.GetBestSearcherValidationMetricRequest, context: grpc.ServicerContext
    ) -> tpb.GetBestSearcherValidationMetricResponse:
        with self.ctx.db.read() as s:
            exp = s.get(models.Experiment, request.experiment_id)
            if exp is None:
                raise NotFound(f"experiment {request.experiment_id} not found")
            values = [
                v
                for v in s.scalars(
                    select(models.Trial.searcher_metric_value).where(models.Trial.experiment_id == exp.id)
                )
                if v is not None
            ]
            if not values:
                raise NotFound(f"experiment {request.experiment_id} has no validation metric yet")
            best = min(values) if smaller_is_better(exp.config) else max(values)
        return tpb.GetBestSearcherValidationMetricResponse(metric=best)
