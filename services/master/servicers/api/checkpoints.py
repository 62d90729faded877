"""Checkpoints: reports from trial code, reads, deletion, and downloads through the master."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from cairn.api.v1 import checkpoint_pb2 as cpb
from cairn.api.v1 import common_pb2
from cairn.checkpoint.v1 import checkpoint_pb2 as service_pb
from cairn.wire import struct_to_python
from services.master.domain.checkpoints import checkpoints
from services.master.domain.identity import access, allocation_access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.paging import page_of
from services.master.domain.reads import checkpoints as reads
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc, stream_rpc

SORT = cpb.GetExperimentCheckpointsRequest.SortBy

ARTIFACTS = Permission.VIEW_EXPERIMENT_ARTIFACTS


def _state_names(states: Any) -> list[str]:
    return [cpb.Checkpoint.State.Name(s).removeprefix("STATE_") for s in states]


def checkpoint_message(record: reads.CheckpointRecord) -> cpb.Checkpoint:
    ck, trial, exp = record.checkpoint, record.trial, record.experiment
    training = cpb.CheckpointTrainingMetadata(
        trial_id=ck.trial_id,
        experiment_id=trial.experiment_id if trial is not None else 0,
        experiment_config=convert.struct(exp.config if exp is not None else {}),
        training_metrics=common_pb2.Metrics(avg_metrics=convert.struct(record.training_metrics)),
        validation_metrics=common_pb2.Metrics(avg_metrics=convert.struct(record.validation_metrics)),
        hparams=convert.struct(trial.hparams if trial is not None else {}),
    )
    if record.searcher_metric is not None:
        training.searcher_metric = record.searcher_metric
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


class CheckpointsApi(ServicerBase):
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
                task_id=ck.task_id,
                resources=dict(ck.resources),
                metadata=struct_to_python(ck.metadata),
            ),
        )
        return cpb.ReportCheckpointResponse()

    @rpc
    def GetCheckpoint(
        self, request: cpb.GetCheckpointRequest, context: grpc.ServicerContext
    ) -> cpb.GetCheckpointResponse:
        principal = self.caller(context)
        with self.ctx.db.read() as s:
            # A user reads the checkpoints of experiments they may read the artifacts of; trial
            # code any (a warm start reads another experiment's).
            if not allocation_access.is_trial_code(principal):
                access.check_checkpoint(
                    s, principal, request.checkpoint_uuid, Permission.VIEW_EXPERIMENT_ARTIFACTS
                )
            record = reads.checkpoint(s, request.checkpoint_uuid)
        return cpb.GetCheckpointResponse(checkpoint=checkpoint_message(record))

    def _page(self, records: list[reads.CheckpointRecord], request: Any) -> tuple[list[cpb.Checkpoint], Any]:
        messages = [checkpoint_message(record) for record in records]
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
        self.check_experiment_readable(context, request.id, Permission.VIEW_EXPERIMENT_ARTIFACTS)
        return self.cache.get(
            "GetExperimentCheckpoints", request, lambda: self._experiment_checkpoints(request)
        )

    def _experiment_checkpoints(
        self, request: cpb.GetExperimentCheckpointsRequest
    ) -> cpb.GetExperimentCheckpointsResponse:
        with self.ctx.db.read() as s:
            records = reads.checkpoints_of_experiment(s, request.id, _state_names(request.states))
        items, pagination = self._page(records, request)
        return cpb.GetExperimentCheckpointsResponse(checkpoints=items, pagination=pagination)

    @rpc
    def GetTrialCheckpoints(
        self, request: cpb.GetTrialCheckpointsRequest, context: grpc.ServicerContext
    ) -> cpb.GetTrialCheckpointsResponse:
        self.check_trials_readable(context, [request.id], Permission.VIEW_EXPERIMENT_ARTIFACTS)
        with self.ctx.db.read() as s:
            records = reads.checkpoints_of_trial(s, request.id, _state_names(request.states))
        items, pagination = self._page(records, request)
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
    def CheckpointsRemoveFiles(
        self, request: cpb.CheckpointsRemoveFilesRequest, context: grpc.ServicerContext
    ) -> cpb.CheckpointsRemoveFilesResponse:
        checkpoints.remove_files(
            self.ctx,
            self.deps.checkpoints,
            self.user(context),
            list(request.checkpoint_uuids),
            list(request.checkpoint_globs),
        )
        return cpb.CheckpointsRemoveFilesResponse()

    @rpc
    def PatchCheckpoints(
        self, request: cpb.PatchCheckpointsRequest, context: grpc.ServicerContext
    ) -> cpb.PatchCheckpointsResponse:
        principal = self.caller(context)
        results = [
            service_pb.DeletedCheckpoint(checkpoint_uuid=p.uuid, remaining=dict(p.resources.resources))
            for p in request.checkpoints
            if p.HasField("resources")
        ]
        with self.ctx.db.read() as s:
            for index, patch in enumerate(request.checkpoints):
                access.check_checkpoint(
                    s, principal, patch.uuid, Permission.UPDATE_EXPERIMENT, field=f"checkpoints[{index}].uuid"
                )
        checkpoints.apply_deletions(self.ctx, results)
        return cpb.PatchCheckpointsResponse()

    @stream_rpc
    def DownloadCheckpoint(
        self, request: cpb.DownloadCheckpointRequest, context: grpc.ServicerContext
    ) -> Iterator[cpb.DownloadCheckpointChunk]:
        principal = self.user(context)
        if not request.checkpoint_uuid:
            raise InvalidArgument("checkpoint_uuid: required")
        with self.ctx.db.read() as s:
            access.check_checkpoint(
                s, principal, request.checkpoint_uuid, Permission.VIEW_EXPERIMENT_ARTIFACTS
            )
            storage = reads.storage_of(s, request.checkpoint_uuid)
        for chunk in self.deps.checkpoints.download(storage, request.checkpoint_uuid):
            f = chunk.file
            yield cpb.DownloadCheckpointChunk(
                path=f.path, offset=f.offset, data=f.data, mode=f.mode, eof=f.eof
            )
