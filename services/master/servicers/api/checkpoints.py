"""Checkpoints: reports from trial code, reads, deletion, and downloads through the master."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
from sqlalchemy import select

from cairn.api.v1 import checkpoint_pb2 as cpb
from cairn.api.v1 import common_pb2
from cairn.checkpoint.v1 import checkpoint_pb2 as service_pb
from cairn.wire import struct_to_python
from services.master.domain import checkpoints
from services.master.domain.errors import InvalidArgument, NotFound
from services.master.domain.paging import page_of
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc, stream_rpc
from services.master.store import models

SORT = cpb.GetExperimentCheckpointsRequest.SortBy


def _state_names(states: Any) -> list[str]:
    return [cpb.Checkpoint.State.Name(s).removeprefix("STATE_") for s in states]


class CheckpointsApi(ServicerBase):
    def _message(self, s: Any, ck: models.Checkpoint) -> cpb.Checkpoint:
        trial = s.get(models.Trial, ck.trial_id)
        exp = s.get(models.Experiment, trial.experiment_id) if trial is not None else None
        training = cpb.CheckpointTrainingMetadata(
            trial_id=ck.trial_id,
            experiment_id=trial.experiment_id if trial is not None else 0,
            experiment_config=convert.struct(exp.config if exp is not None else {}),
            training_metrics=common_pb2.Metrics(avg_metrics=convert.struct({})),
            validation_metrics=common_pb2.Metrics(avg_metrics=convert.struct({})),
            hparams=convert.struct(trial.hparams if trial is not None else {}),
        )
        metric_name = ((exp.config.get("searcher") or {}).get("metric") if exp is not None else None) or ""
        for group, field in (("validation", "validation_metrics"), ("training", "training_metrics")):
            row = s.scalar(
                select(models.Metric)
                .where(
                    models.Metric.trial_id == ck.trial_id,
                    models.Metric.group_name == group,
                    models.Metric.steps_completed == ck.steps_completed,
                    models.Metric.archived.is_(False),
                )
                .order_by(models.Metric.id.desc())
                .limit(1)
            )
            if row is not None:
                getattr(training, field).avg_metrics.update(row.metrics)
                value = row.metrics.get(metric_name)
                if group == "validation" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    training.searcher_metric = float(value)
        return cpb.Checkpoint(
            task_id=ck.task_id,
            allocation_id=ck.allocation_id,
            uuid=ck.uuid,
            report_time=convert.ts(ck.report_time),
            resources={k: int(v) for k, v in ck.resources.items()},
            metadata=convert.struct(ck.metadata_),
            state=convert.checkpoint_state(ck.state),
            training=training,
        )

    @rpc
    def ReportCheckpoint(
        self, request: cpb.ReportCheckpointRequest, context: grpc.ServicerContext
    ) -> cpb.ReportCheckpointResponse:
        ck = request.checkpoint
        checkpoints.report(
            self.ctx,
            self.caller(context),
            checkpoints.ReportedCheckpoint(
                uuid=ck.uuid,
                allocation_id=ck.allocation_id,
                resources=dict(ck.resources),
                metadata=struct_to_python(ck.metadata),
            ),
        )
        return cpb.ReportCheckpointResponse()

    @rpc
    def GetCheckpoint(
        self, request: cpb.GetCheckpointRequest, context: grpc.ServicerContext
    ) -> cpb.GetCheckpointResponse:
        with self.ctx.db.read() as s:
            ck = s.get(models.Checkpoint, request.checkpoint_uuid)
            if ck is None:
                raise NotFound(f"checkpoint {request.checkpoint_uuid} not found")
            return cpb.GetCheckpointResponse(checkpoint=self._message(s, ck))

    def _list(self, s: Any, trial_ids: list[int], request: Any) -> tuple[list[cpb.Checkpoint], Any]:
        q = select(models.Checkpoint).where(models.Checkpoint.trial_id.in_(trial_ids))
        if request.states:
            q = q.where(models.Checkpoint.state.in_(_state_names(request.states)))
        rows = list(s.scalars(q))
        messages = [self._message(s, ck) for ck in rows]
        descending = request.order_by == common_pb2.ORDER_BY_DESC
        if request.sort_by_metric:
            name = request.sort_by_metric

            def metric(m: cpb.Checkpoint) -> float:
                found = m.training.validation_metrics.avg_metrics.fields.get(name)
                return found.number_value if found is not None else float("inf")

            messages.sort(key=metric, reverse=descending)
        else:
            keys = {
                SORT.SORT_BY_UUID: lambda m: m.uuid,
                SORT.SORT_BY_TRIAL_ID: lambda m: m.training.trial_id,
                SORT.SORT_BY_END_TIME: lambda m: m.report_time.ToDatetime(),
                SORT.SORT_BY_STATE: lambda m: m.state,
                SORT.SORT_BY_SEARCHER_METRIC: lambda m: m.training.searcher_metric,
            }
            key = keys.get(
                request.sort_by_attr,
                lambda m: (m.training.trial_id, m.metadata.fields["steps_completed"].number_value),
            )
            messages.sort(key=key, reverse=descending)
        page = page_of(len(messages), request.offset, request.limit)
        return messages[page.start : page.end], convert.pagination(page)

    @rpc
    def GetExperimentCheckpoints(
        self, request: cpb.GetExperimentCheckpointsRequest, context: grpc.ServicerContext
    ) -> cpb.GetExperimentCheckpointsResponse:
        return self.cache.get(
            "GetExperimentCheckpoints", request, lambda: self._experiment_checkpoints(request)
        )

    def _experiment_checkpoints(
        self, request: cpb.GetExperimentCheckpointsRequest
    ) -> cpb.GetExperimentCheckpointsResponse:
        with self.ctx.db.read() as s:
            if s.get(models.Experiment, request.id) is None:
                raise NotFound(f"experiment {request.id} not found")
            trial_ids = list(
                s.scalars(select(models.Trial.id).where(models.Trial.experiment_id == request.id))
            )
            items, pagination = self._list(s, trial_ids, request)
        return cpb.GetExperimentCheckpointsResponse(checkpoints=items, pagination=pagination)

    @rpc
    def GetTrialCheckpoints(
        self, request: cpb.GetTrialCheckpointsRequest, context: grpc.ServicerContext
    ) -> cpb.GetTrialCheckpointsResponse:
        with self.ctx.db.read() as s:
            if s.get(models.Trial, request.id) is None:
                raise NotFound(f"trial {request.id} not found")
            items, pagination = self._list(s, [request.id], request)
        return cpb.GetTrialCheckpointsResponse(checkpoints=items, pagination=pagination)

    @rpc
    def DeleteCheckpoints(
        self, request: cpb.DeleteCheckpointsRequest, context: grpc.ServicerContext
    ) -> cpb.DeleteCheckpointsResponse:
        checkpoints.delete(
            self.ctx, self.deps.checkpoints, self.user(context), list(request.checkpoint_uuids)
        )
        return cpb.DeleteCheckpointsResponse()

    @rpc
    def PatchCheckpoints(
        self, request: cpb.PatchCheckpointsRequest, context: grpc.ServicerContext
    ) -> cpb.PatchCheckpointsResponse:
        self.caller(context)
        results = [
            service_pb.DeletedCheckpoint(checkpoint_uuid=p.uuid, remaining=dict(p.resources.resources))
            for p in request.checkpoints
            if p.HasField("resources")
        ]
        checkpoints.apply_deletions(self.ctx, results)
        return cpb.PatchCheckpointsResponse()

    @stream_rpc
    def DownloadCheckpoint(
        self, request: cpb.DownloadCheckpointRequest, context: grpc.ServicerContext
    ) -> Iterator[cpb.DownloadCheckpointChunk]:
        self.user(context)
        if not request.checkpoint_uuid:
            raise InvalidArgument("checkpoint_uuid: required")
        with self.ctx.unit_of_work() as w:
            ck = w.session.get(models.Checkpoint, request.checkpoint_uuid)
            if ck is None:
                raise NotFound(f"checkpoint {request.checkpoint_uuid} not found")
            storage = checkpoints.storage_of(w, ck)
        for chunk in self.deps.checkpoints.download(storage, request.checkpoint_uuid):
            f = chunk.file
            yield cpb.DownloadCheckpointChunk(
                path=f.path, offset=f.offset, data=f.data, mode=f.mode, eof=f.eof
            )
