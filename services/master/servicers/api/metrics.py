"""Trial reporting (metrics, progress, early exit, searcher operations) and reading metrics back."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Sequence
from datetime import UTC
from typing import Any

import grpc

from cairn.api.v1 import common_pb2
from cairn.api.v1 import trial_pb2 as tpb
from cairn.wire import struct_to_python
from services.common.local_calls import RenderedJson, accepts_rendered_json
from services.master.domain.identity import allocation_access
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.paging import page_of
from services.master.domain.metrics import compare, intake, progress, signals, system_metrics
from services.master.domain.metrics.downsample import downsample
from services.master.domain.metrics.reports import Report
from services.master.domain.reads import metrics as reads
from services.master.domain.reads import trials as trial_reads
from services.master.servicers.api import convert, metrics_json, metrics_wire
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc, stream_rpc

REPORTS_PER_MESSAGE = 1000
EARLY_EXIT_NAMES = {
    tpb.TrialEarlyExit.EXITED_REASON_INVALID_HP: "INVALID_HP",
    tpb.TrialEarlyExit.EXITED_REASON_INIT_INVALID_HP: "INIT_INVALID_HP",
    tpb.TrialEarlyExit.EXITED_REASON_USER_REQUESTED_STOP: "USER_REQUESTED_STOP",
}


def report_metrics(group: str, values: Any, batch_metrics: Any) -> dict[str, Any]:
    """A report's `metrics` as Determined answers them: a validation's values under
    "validation_metrics" (the key its SDK reads for that group; `avg_metrics` too, for Cairn's own
    readers), any other group's under "avg_metrics"."""
    result = {"avg_metrics": values, "batch_metrics": batch_metrics}
    if group == "validation":
        result["validation_metrics"] = values
    return result


class MetricsApi(ServicerBase):
    @rpc
    def ReportTrialMetrics(
        self, request: tpb.ReportTrialMetricsRequest, context: grpc.ServicerContext
    ) -> tpb.ReportTrialMetricsResponse:
        self._report(context, request.metrics, request.group, "metrics")
        return tpb.ReportTrialMetricsResponse()

    @rpc
    def ReportTrialTrainingMetrics(
        self, request: tpb.ReportTrialTrainingMetricsRequest, context: grpc.ServicerContext
    ) -> tpb.ReportTrialTrainingMetricsResponse:
        self._report(context, request.training_metrics, "training", "training_metrics")
        return tpb.ReportTrialTrainingMetricsResponse()

    @rpc
    def ReportTrialValidationMetrics(
        self, request: tpb.ReportTrialValidationMetricsRequest, context: grpc.ServicerContext
    ) -> tpb.ReportTrialValidationMetricsResponse:
        self._report(context, request.validation_metrics, "validation", "validation_metrics")
        return tpb.ReportTrialValidationMetricsResponse()

    def _report(self, context: grpc.ServicerContext, m: tpb.TrialMetrics, group: str, field: str) -> None:
        """One report of `group` (`field`: where the request carries it, for errors)."""
        if not m.HasField("steps_completed") and group not in system_metrics.PROFILER_GROUPS:
            raise InvalidArgument(f"{field}.steps_completed: required")
        report = Report(
            group=group,
            # Determined's profiler (core.profiler.on()) reports its samples without a step: they
            # belong to no step, and are stored at 0 as the searcher's groups never are.
            steps_completed=m.steps_completed,
            metrics=struct_to_python(m.metrics.avg_metrics),
            report_time=m.report_time.ToDatetime(UTC) if m.HasField("report_time") else None,
            batch_metrics=[struct_to_python(b) for b in m.metrics.batch_metrics] or None,
        )
        intake.report(self.ctx, self.caller(context), m.trial_id, m.trial_run_id, [report])

    @rpc
    def ReportTrialMetricsBatch(
        self, request: tpb.ReportTrialMetricsBatchRequest, context: grpc.ServicerContext
    ) -> tpb.ReportTrialMetricsBatchResponse:
        result = intake.report(
            self.ctx,
            self.caller(context),
            request.trial_id,
            request.trial_run_id,
            metrics_wire.batch_of(request),
            after_seq=request.after_seq,
            progress=request.progress if request.HasField("progress") else None,
        )
        return tpb.ReportTrialMetricsBatchResponse(
            stored=result.stored,
            duplicates=result.duplicates,
            max_stored_seq=result.max_stored_seq,
            ordered_batches=True,
            progress_stored=request.HasField("progress"),
        )

    @stream_rpc
    def GetMetrics(
        self, request: tpb.GetMetricsRequest, context: grpc.ServicerContext
    ) -> Iterator[Any]:  # GetMetricsResponse, or RenderedJson of one for the REST gateway
        if not request.trial_ids:
            raise InvalidArgument("trial_ids: required")
        yield from self._group_stream(
            "GetMetrics",
            request,
            context,
            request.trial_ids,
            request.group or "training",
            request.max_datapoints,
            tpb.GetMetricsResponse,
        )

    @stream_rpc
    def GetTrainingMetrics(
        self, request: tpb.GetTrainingMetricsRequest, context: grpc.ServicerContext
    ) -> Iterator[Any]:  # GetTrainingMetricsResponse, or RenderedJson of one for the REST gateway
        trial_ids = self._stream_trials(request.trial_ids)
        yield from self._group_stream(
            "GetTrainingMetrics", request, context, trial_ids, "training", 0, tpb.GetTrainingMetricsResponse
        )

    @stream_rpc
    def GetValidationMetrics(
        self, request: tpb.GetValidationMetricsRequest, context: grpc.ServicerContext
    ) -> Iterator[Any]:  # GetValidationMetricsResponse, or RenderedJson of one for the REST gateway
        trial_ids = self._stream_trials(request.trial_ids)
        yield from self._group_stream(
            "GetValidationMetrics",
            request,
            context,
            trial_ids,
            "validation",
            0,
            tpb.GetValidationMetricsResponse,
        )

    def _stream_trials(self, trial_ids: Sequence[int]) -> list[int]:
        """A per-group stream's trials, checked (compare.check_stream_trials), each one that exists."""
        checked = compare.check_stream_trials(list(trial_ids))
        with self.ctx.db.read() as s:
            for trial_id in checked:
                trial_reads.trial_row(s, trial_id)  # NotFound before streaming starts
        return checked

    def _group_stream(
        self,
        name: str,
        request: Any,
        context: grpc.ServicerContext,
        trial_ids: Sequence[int],
        group: str,
        max_datapoints: int,
        response_type: Any,
    ) -> Iterator[Any]:
        """The reports of `group` of each trial, as messages of `response_type` (each a list of
        MetricsReport under `metrics`) or, to the REST gateway, the JSON it would print of them."""
        self.check_trials_readable(context, trial_ids)
        if accepts_rendered_json(context):
            # The REST gateway's own call: the JSON it would print, made from the rows.
            def rendered() -> list[RenderedJson]:
                return [
                    RenderedJson(metrics_json.response_json(page))
                    for page in self._pages(trial_ids, group, max_datapoints)
                ]

            yield from self.cache.get(f"{name}:json", request, rendered)
            return
        yield from self.cache.get(
            name,
            request,
            lambda: [
                response_type(metrics=self._reports(page))
                for page in self._pages(trial_ids, group, max_datapoints)
            ],
        )

    def _pages(self, trial_ids: Sequence[int], group: str, max_datapoints: int) -> Iterator[Sequence[Any]]:
        """The rows of each reply message: per trial, at most REPORTS_PER_MESSAGE at a time."""
        for trial_id in trial_ids:
            with self.ctx.db.read_connection() as connection:
                rows = reads.reports_of_trial(connection, trial_id, group)
            if max_datapoints > 0:
                rows = downsample(rows, max_datapoints)
            for start in range(0, len(rows), REPORTS_PER_MESSAGE):
                yield rows[start : start + REPORTS_PER_MESSAGE]

    @staticmethod
    def _reports(page: Sequence[Any]) -> list[tpb.MetricsReport]:
        return [
            tpb.MetricsReport(
                trial_id=row.trial_id,
                end_time=convert.ts(row.report_time),
                metrics=convert.struct(report_metrics(row.group_name, row.metrics, row.batch_metrics)),
                total_batches=int(row.steps_completed),
                archived=row.archived,
                id=int(row.id),
                trial_run_id=row.trial_run_id,
                group=row.group_name,
            )
            for row in page
        ]

    @rpc
    def ReportTrialProgress(
        self, request: tpb.ReportTrialProgressRequest, context: grpc.ServicerContext
    ) -> tpb.ReportTrialProgressResponse:
        progress.report_progress(self.ctx, self.caller(context), request.trial_id, request.progress)
        return tpb.ReportTrialProgressResponse()

    @rpc
    def PostTrialRunnerMetadata(
        self, request: tpb.PostTrialRunnerMetadataRequest, context: grpc.ServicerContext
    ) -> tpb.PostTrialRunnerMetadataResponse:
        progress.report_runner_status(
            self.ctx, self.caller(context), request.trial_id, request.metadata.state
        )
        return tpb.PostTrialRunnerMetadataResponse()

    @rpc
    def ReportTrialSearcherEarlyExit(
        self, request: tpb.ReportTrialSearcherEarlyExitRequest, context: grpc.ServicerContext
    ) -> tpb.ReportTrialSearcherEarlyExitResponse:
        reason = EARLY_EXIT_NAMES.get(request.early_exit.reason)
        if reason is None:
            raise InvalidArgument("early_exit.reason: required")
        progress.report_early_exit(self.ctx, self.caller(context), request.trial_id, reason)
        return tpb.ReportTrialSearcherEarlyExitResponse()

    @rpc
    def GetCurrentTrialSearcherOperation(
        self, request: tpb.GetCurrentTrialSearcherOperationRequest, context: grpc.ServicerContext
    ) -> tpb.GetCurrentTrialSearcherOperationResponse:
        operation = signals.current_operation(
            self.ctx, self.caller(context), request.trial_id, hold=self.deps.verdict_wait_slots.hold
        )
        response = tpb.GetCurrentTrialSearcherOperationResponse(completed=operation.completed)
        if operation.length > 0:
            response.op.validate_after.request_id = operation.request_id
            response.op.validate_after.length = operation.length
        return response

    @rpc
    def CompleteTrialSearcherValidation(
        self, request: tpb.CompleteTrialSearcherValidationRequest, context: grpc.ServicerContext
    ) -> tpb.CompleteTrialSearcherValidationResponse:
        signals.complete_operation(
            self.ctx,
            self.caller(context),
            request.trial_id,
            int(request.completed_operation.validate_after.length),
            request.searcher_metric,
        )
        return tpb.CompleteTrialSearcherValidationResponse()

    @rpc
    def GetBestSearcherValidationMetric(
        self, request: tpb.GetBestSearcherValidationMetricRequest, context: grpc.ServicerContext
    ) -> tpb.GetBestSearcherValidationMetricResponse:
        principal = self.caller(context)
        if not allocation_access.is_trial_code(principal):
            self.check_experiment_readable(context, request.experiment_id)
        with self.ctx.db.read() as s:
            allocation_access.check_experiment(s, principal, request.experiment_id)
            best = reads.best_searcher_metric(s, request.experiment_id)
        return tpb.GetBestSearcherValidationMetricResponse(metric=best)


_METRIC_TYPE_GROUPS = {
    tpb.METRIC_TYPE_TRAINING: "training",
    tpb.METRIC_TYPE_VALIDATION: "validation",
    tpb.METRIC_TYPE_PROFILING: "profiling",
}
_GROUP_METRIC_TYPES = {group: kind for kind, group in _METRIC_TYPE_GROUPS.items()}


def _range(message: Any, fields: tuple[str, ...], convert_value: Any = None) -> compare.Range | None:
    """A Range of a DoubleFieldFilter, Int32FieldFilter or TimestampFieldFilter; None when the
    request did not send it."""
    bounds: dict[str, Any] = {}
    for name in fields:
        if message.HasField(name):
            value = getattr(message, name)
            bounds[name] = convert_value(value) if convert_value else value
    lists = {name: tuple(getattr(message, name)) for name in ("incl", "not_in") if hasattr(message, name)}
    if not bounds and not any(lists.values()):
        return None
    return compare.Range(**bounds, **lists)


def _series_filter(request: tpb.CompareTrialsRequest) -> compare.SeriesFilter:
    if not request.HasField("time_series_filter"):
        return compare.SeriesFilter()
    f = request.time_series_filter
    bounds = ("lt", "lte", "gt", "gte")
    return compare.check_filter(
        f.name if f.HasField("name") else None,
        _range(f.double_range, bounds) if f.HasField("double_range") else None,
        _range(f.integer_range, bounds) if f.HasField("integer_range") else None,
        _range(f.time_range, bounds, lambda t: t.ToDatetime(UTC)) if f.HasField("time_range") else None,
    )


class CompareApi(ServicerBase):
    """Several trials' metric series side by side (Determined's CompareTrials)."""

    @rpc
    def CompareTrials(
        self, request: tpb.CompareTrialsRequest, context: grpc.ServicerContext
    ) -> tpb.CompareTrialsResponse:
        self.caller(context)
        if request.metric_type != tpb.METRIC_TYPE_UNSPECIFIED and request.group:
            raise InvalidArgument("metric_type, group: give one or the other, not both")
        group = _METRIC_TYPE_GROUPS.get(request.metric_type, "") if request.metric_type else request.group
        query = compare.check_compare(
            trial_ids=list(request.trial_ids),
            max_datapoints=request.max_datapoints,
            metric_names=list(request.metric_names),
            metric_ids=list(request.metric_ids),
            group=group,
            start_batches=request.start_batches,
            end_batches=request.end_batches,
            series_filter=_series_filter(request),
        )
        self.check_trials_readable(context, query.trial_ids)
        with self.ctx.db.read() as s:
            trials = {t: convert.trial(trial_reads.trial_row(s, t)) for t in query.trial_ids}
        compared = []
        for trial_id in query.trial_ids:
            downsampled = []
            for metric_group, names in query.names_by_group.items():
                with self.ctx.db.read_connection() as connection:
                    rows = reads.reports_of_trial(connection, trial_id, metric_group)
                points = compare.series(rows, names, query)
                if not points:
                    continue
                downsampled.append(
                    tpb.DownsampledMetrics(
                        group=metric_group,
                        type=_GROUP_METRIC_TYPES.get(metric_group, tpb.METRIC_TYPE_UNSPECIFIED),
                        data=[
                            tpb.SeriesDataPoint(
                                batches=p.batches,
                                time=convert.ts(p.time),
                                values=convert.struct(p.values),
                                epoch=p.epoch,
                            )
                            for p in points
                        ],
                    )
                )
            compared.append(tpb.ComparableTrial(trial=trials[trial_id], metrics=downsampled))
        return tpb.CompareTrialsResponse(trials=compared)


class SamplesApi(ServicerBase):
    @stream_rpc
    def TrialsSample(
        self, request: tpb.TrialsSampleRequest, context: grpc.ServicerContext
    ) -> Iterator[tpb.TrialsSampleResponse]:
        self.check_experiment_readable(context, request.experiment_id)
        response, previous, ended = self._sample(request, None)
        yield response
        if request.period_seconds <= 0 or ended:
            return
        # Each sample after the first is waited for on this stream's thread: a followed stream's
        # slot is held meanwhile (thread_slots.py); past the last one the stream ends after its
        # first sample with RESOURCE_EXHAUSTED, rather than take a thread other calls need.
        with self.deps.follow_slots.hold():
            while True:
                self.ctx.stopping.wait(min(float(request.period_seconds), 60.0))
                if self.ctx.stopping.is_set() or not context.is_active():
                    return
                response, previous, ended = self._sample(request, previous)
                yield response
                if ended:
                    return

    def _sample(
        self, request: tpb.TrialsSampleRequest, previous: set[int] | None
    ) -> tuple[tpb.TrialsSampleResponse, set[int], bool]:
        """One sample, the trials in it, and whether the experiment has ended."""
        series, ended = self.deps.samples.sample(
            request.experiment_id,
            metric_name=request.metric_name,
            group=request.group,
            max_trials=request.max_trials,
            max_datapoints=request.max_datapoints,
            start_batches=request.start_batches,
            end_batches=request.end_batches,
        )
        ids = {t.trial_id for t in series}
        response = tpb.TrialsSampleResponse(
            trials=[
                tpb.TrialsSampleResponse.Trial(
                    trial_id=t.trial_id,
                    hparams=convert.struct(t.hparams),
                    data=[
                        tpb.DataPoint(batches=p.batches, value=p.value, time=convert.ts(p.time))
                        for p in t.points
                    ],
                )
                for t in series
            ],
            promoted_trials=sorted(ids - previous) if previous is not None else [],
            demoted_trials=sorted(previous - ids) if previous is not None else [],
        )
        return response, ids, ended


class WorkloadsApi(ServicerBase):
    """What Determined's harness and CLI ask of a trial beyond metrics: a run announcing itself,
    and the trial's history as workloads."""

    @rpc
    def RunPrepareForReporting(
        self, request: tpb.RunPrepareForReportingRequest, context: grpc.ServicerContext
    ) -> tpb.RunPrepareForReportingResponse:
        progress.check_run_reporter(self.ctx, self.caller(context), request.run_id)
        storage = json.dumps(struct_to_python(request.checkpoint_storage), sort_keys=True)
        return tpb.RunPrepareForReportingResponse(storage_id=zlib.crc32(storage.encode()) & 0x7FFFFFFF)

    @rpc
    def GetTrialWorkloads(
        self, request: tpb.GetTrialWorkloadsRequest, context: grpc.ServicerContext
    ) -> tpb.GetTrialWorkloadsResponse:
        self.check_trials_readable(context, [request.trial_id])
        F = tpb.GetTrialWorkloadsRequest
        wanted_groups = {
            F.FILTER_OPTION_UNSPECIFIED: ("training", "validation"),
            F.FILTER_OPTION_VALIDATION: ("validation",),
            F.FILTER_OPTION_CHECKPOINT_OR_VALIDATION: ("validation",),
            F.FILTER_OPTION_CHECKPOINT: (),
        }[request.filter]
        with_checkpoints = request.filter != F.FILTER_OPTION_VALIDATION
        items: list[tuple[int, int, tpb.Workload]] = []
        with self.ctx.db.read() as s:
            reports, checkpoint_rows = reads.trial_history(
                s, request.trial_id, wanted_groups, with_checkpoints
            )
        for row in reports:
            workload = convert.metrics_workload(row)
            assert workload is not None
            if request.include_batch_metrics and row.batch_metrics:
                workload.metrics.batch_metrics.extend(convert.struct(b) for b in row.batch_metrics)
            if row.group_name == "training":
                items.append((int(row.steps_completed), 0, tpb.Workload(training=workload)))
            else:
                items.append((int(row.steps_completed), 1, tpb.Workload(validation=workload)))
        for ck in checkpoint_rows:
            workload_ck = tpb.CheckpointWorkload(
                uuid=ck.uuid,
                end_time=convert.ts(ck.report_time),
                state=convert.checkpoint_state(ck.state),
                resources={k: int(v) for k, v in ck.resources.items()},
                total_batches=int(ck.steps_completed),
                metadata=convert.struct(ck.metadata_),
            )
            items.append((int(ck.steps_completed), 2, tpb.Workload(checkpoint=workload_ck)))
        descending = request.order_by == common_pb2.ORDER_BY_DESC
        items.sort(key=lambda item: (item[0], item[1]), reverse=descending)
        page = page_of(len(items), request.offset, request.limit)
        return tpb.GetTrialWorkloadsResponse(
            workloads=[w for _, _, w in items[page.start : page.end]], pagination=convert.pagination(page)
        )
