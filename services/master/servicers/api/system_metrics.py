"""Tasks' system metrics: Determined's profiler API for a trial (the agents' samples of its
containers, and what its code reported with core.profiler.on()), and every task's series for the
WebUI (domain/metrics/system_metrics.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy.orm import Session

from cairn.api.v1 import task_pb2
from cairn.api.v1 import trial_pb2 as tpb
from services.master.domain.identity import access
from services.master.domain.kernel.states import TERMINAL
from services.master.domain.metrics import system_metrics
from services.master.domain.metrics.system_metrics import Series
from services.master.domain.reads import tasks as task_reads
from services.master.domain.reads import trials as reads
from services.master.servicers.api import convert
from services.master.servicers.api.trials import TrialsApi
from services.master.servicers.errors import rpc, stream_rpc

SYSTEM = tpb.TrialProfilerMetricLabels.PROFILER_METRIC_TYPE_SYSTEM
# Readings per series a task's page asks for at most (a day at the default 10 s interval).
MAX_SYSTEM_METRIC_READINGS = 8_640
# A followed stream looks again at least this often (new samples also wake it).
FOLLOW_WAIT_S = 1.0


class SystemMetricsApi(TrialsApi):
    @stream_rpc
    def GetTrialProfilerAvailableSeries(
        self, request: tpb.GetTrialProfilerAvailableSeriesRequest, context: grpc.ServicerContext
    ) -> Iterator[tpb.GetTrialProfilerAvailableSeriesResponse]:
        trial_id = request.trial_id
        self.check_trial_access(context, trial_id)
        self.trial_message(trial_id)  # NotFound before streaming starts
        # Only the labels are kept between reads (a followed trial's readings are not held).
        labels: set[tuple[str, str, str]] = set()
        sent: set[tuple[str, str, str]] | None = None
        for new in self._follow_trial(trial_id, request.follow, context):
            labels.update((x.name, x.agent_id, x.gpu_uuid) for x in new)
            if labels != sent:
                sent = set(labels)
                yield tpb.GetTrialProfilerAvailableSeriesResponse(
                    labels=[_labels(trial_id, name, agent, gpu) for name, agent, gpu in sorted(labels)]
                )

    @stream_rpc
    def GetTrialProfilerMetrics(
        self, request: tpb.GetTrialProfilerMetricsRequest, context: grpc.ServicerContext
    ) -> Iterator[tpb.GetTrialProfilerMetricsResponse]:
        wanted = request.labels
        trial_id = wanted.trial_id
        self.check_trial_access(context, trial_id)
        self.trial_message(trial_id)
        if wanted.metric_type not in (tpb.TrialProfilerMetricLabels.PROFILER_METRIC_TYPE_UNSPECIFIED, SYSTEM):
            return  # timing and misc series are not kept: nothing matches
        for found in self._follow_trial(trial_id, request.follow, context):
            for series in found:
                if (
                    (wanted.name and series.name != wanted.name)
                    or (wanted.agent_id and series.agent_id != wanted.agent_id)
                    or (wanted.gpu_uuid and series.gpu_uuid != wanted.gpu_uuid)
                ):
                    continue
                yield tpb.GetTrialProfilerMetricsResponse(
                    batch=tpb.TrialProfilerMetricsBatch(
                        values=series.values,
                        batches=[0] * len(series.values),
                        timestamps=_stamps(series),
                        labels=_labels(trial_id, series.name, series.agent_id, series.gpu_uuid),
                    )
                )

    def _follow_trial(
        self, trial_id: int, follow: bool, context: grpc.ServicerContext
    ) -> Iterator[list[Series]]:
        """The trial's series as read (each read only the readings stored since the one before);
        with `follow`, read again whenever new samples are stored, until the trial ends or the
        client leaves. The first read is yielded even when empty."""
        topic = system_metrics.system_metrics_topic(trial_id=trial_id)
        after_samples = after_reports = 0
        first = True
        with self.deps.follow_slots.hold(follow):
            while True:
                seen = self.ctx.topics.version(topic)
                with self.ctx.db.read() as s:
                    done = _trial_over(s, trial_id)
                    sampled, after_samples = system_metrics.series_of(
                        s, trial_id=trial_id, after_id=after_samples
                    )
                    reported, after_reports = system_metrics.profiler_series_of(s, trial_id, after_reports)
                new = sampled + reported
                if new or first:
                    yield new
                first = False
                if not follow or done or not context.is_active() or self.ctx.topics.closed:
                    return
                self.ctx.topics.wait(topic, seen, timeout=FOLLOW_WAIT_S)

    @rpc
    def GetTaskSystemMetrics(
        self, request: task_pb2.GetTaskSystemMetricsRequest, context: grpc.ServicerContext
    ) -> task_pb2.GetTaskSystemMetricsResponse:
        if request.limit < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "limit: must be 0 or more")
        if request.after_id < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "after_id: must be 0 or more")
        limit = min(request.limit or MAX_SYSTEM_METRIC_READINGS, MAX_SYSTEM_METRIC_READINGS)
        since = request.since.ToDatetime(UTC) if request.HasField("since") else None
        with self.ctx.db.read() as s:
            task = task_reads.task(s, request.task_id)
            access.check_task_readable(s, self.caller(context), task)
            found, last_id = system_metrics.series_of(
                s, task_id=task.id, since=since, after_id=request.after_id, limit=limit
            )
        return task_pb2.GetTaskSystemMetricsResponse(
            last_id=last_id,
            series=[
                task_pb2.SystemMetricSeries(
                    name=x.name,
                    agent_id=x.agent_id,
                    gpu_uuid=x.gpu_uuid,
                    unit=x.unit,
                    timestamps=_stamps(x),
                    values=x.values,
                )
                for x in found
            ],
            notes=_notes(found),
        )


def _stamps(series: Series) -> list[Timestamp]:
    return [stamp for stamp in (convert.ts(t) for t in series.times) if stamp is not None]


def _trial_over(s: Session, trial_id: int) -> bool:
    state = reads.trial_state(s, trial_id)
    return state is None or state in TERMINAL


def _labels(trial_id: int, name: str, agent_id: str, gpu_uuid: str) -> tpb.TrialProfilerMetricLabels:
    return tpb.TrialProfilerMetricLabels(
        trial_id=trial_id, name=name, agent_id=agent_id, gpu_uuid=gpu_uuid, metric_type=SYSTEM
    )


def _notes(found: list[Series]) -> list[str]:
    if not found:
        return ["no samples: the task has not run yet, or its agents do not collect system metrics"]
    if not any(x.name.startswith("container_gpu_") for x in found):
        return ["no GPU metrics: the task ran on CPU slots"]
    return []
