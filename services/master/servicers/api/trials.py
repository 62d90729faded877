"""Trials: read, kill, and their logs (a server stream that can follow the trial)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC
from typing import Any

import grpc

from cairn.api.v1 import common_pb2, task_pb2
from cairn.api.v1 import trial_pb2 as tpb
from services.master.domain.experiments import experiments as experiment_lifecycle
from services.master.domain.experiments import unmanaged
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.states import TERMINAL, RunState, TaskKind
from services.master.domain.metrics.logs import LogFields, LogFilter, follow_log_fields, read_logs
from services.master.domain.reads import tasks as task_reads
from services.master.domain.reads import trials as reads
from services.master.domain.trials import trials as trial_lifecycle
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc, stream_rpc

LEVEL_NAMES = {
    "TRACE": tpb.LOG_LEVEL_TRACE,
    "DEBUG": tpb.LOG_LEVEL_DEBUG,
    "INFO": tpb.LOG_LEVEL_INFO,
    "WARNING": tpb.LOG_LEVEL_WARNING,
    "ERROR": tpb.LOG_LEVEL_ERROR,
    "CRITICAL": tpb.LOG_LEVEL_CRITICAL,
}


class TrialsApi(ServicerBase):
    def trial_message(self, trial_id: int) -> tpb.Trial:
        with self.ctx.db.read() as s:
            return convert.trial(reads.trial_row(s, trial_id))

    def check_trial_access(self, context: grpc.ServicerContext, trial_id: int) -> None:
        """Trial code may only read its own trial; a user one they may read."""
        principal = self.caller(context)
        with self.ctx.db.read() as s:
            access.check_trial(s, principal, trial_id, Permission.VIEW_EXPERIMENT_METADATA)

    @rpc
    def GetTrial(self, request: tpb.GetTrialRequest, context: grpc.ServicerContext) -> tpb.GetTrialResponse:
        self.check_trial_access(context, request.trial_id)
        return self.cache.get(
            "GetTrial", request, lambda: tpb.GetTrialResponse(trial=self.trial_message(request.trial_id))
        )

    @rpc
    def KillTrial(
        self, request: tpb.KillTrialRequest, context: grpc.ServicerContext
    ) -> tpb.KillTrialResponse:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            trial = trial_lifecycle.load(w, request.id)
            exp = experiment_lifecycle.load(w, trial.experiment_id)
            experiment_lifecycle.check_can_modify(w.session, principal, exp)
            if exp.unmanaged:
                unmanaged.kill_trial(self.ctx, w, trial, exp)
            else:
                trial_lifecycle.stop(self.ctx, w, trial, exp, RunState.STOPPING_KILLED)
        return tpb.KillTrialResponse()

    def _ended(
        self, context: grpc.ServicerContext, *, trial_id: int | None, task_id: str
    ) -> Callable[[], bool]:
        """Whether a followed stream of the trial's (or task's) logs is over: it ended, or the
        client left."""

        def ended() -> bool:
            with self.ctx.db.read() as s:
                if trial_id is None:
                    return task_reads.task_ended(s, task_id) or not context.is_active()
                state = reads.trial_state(s, trial_id)
            return state is None or state in TERMINAL or not context.is_active()

        return ended

    def _log_fields(
        self, follow: bool, context: grpc.ServicerContext, *, trial_id: int | None = None, task_id: str = ""
    ) -> Iterator[LogFields]:
        with self.deps.follow_slots.hold(follow):
            for fields in follow_log_fields(
                self.ctx,
                trial_id=trial_id,
                task_id=task_id,
                follow=follow,
                is_done=self._ended(context, trial_id=trial_id, task_id=task_id),
            ):
                if not context.is_active():
                    return
                yield fields

    @stream_rpc
    def TrialLogsFields(
        self, request: tpb.TrialLogsFieldsRequest, context: grpc.ServicerContext
    ) -> Iterator[tpb.TrialLogsFieldsResponse]:
        self.check_trial_access(context, request.trial_id)
        self.trial_message(request.trial_id)  # NotFound before streaming starts
        for fields in self._log_fields(request.follow, context, trial_id=request.trial_id):
            yield tpb.TrialLogsFieldsResponse(
                agent_ids=fields.agent_ids,
                container_ids=fields.container_ids,
                rank_ids=fields.rank_ids,
                stdtypes=fields.stdtypes,
                sources=fields.sources,
            )

    @stream_rpc
    def TaskLogsFields(
        self, request: task_pb2.TaskLogsFieldsRequest, context: grpc.ServicerContext
    ) -> Iterator[task_pb2.TaskLogsFieldsResponse]:
        with self.ctx.db.read() as s:
            task = task_reads.task(s, request.task_id)
            trial_id = task_reads.trial_of_task(s, task.id) if task.kind == TaskKind.TRIAL else None
            access.check_task_readable(s, self.caller(context), task)
        # A trial's lines are found by trial id (as TaskLogs reads them), any other task's by task id.
        fields_stream = (
            self._log_fields(request.follow, context, trial_id=trial_id)
            if trial_id is not None
            else self._log_fields(request.follow, context, task_id=task.id)
        )
        for fields in fields_stream:
            yield task_pb2.TaskLogsFieldsResponse(
                allocation_ids=fields.allocation_ids,
                agent_ids=fields.agent_ids,
                container_ids=fields.container_ids,
                rank_ids=fields.rank_ids,
                stdtypes=fields.stdtypes,
                sources=fields.sources,
            )

    def _log_rows(
        self, request: Any, context: grpc.ServicerContext, *, trial_id: int | None = None, task_id: str = ""
    ) -> Iterator[Any]:
        """A trial's (by trial id) or any task's (by task id) log lines as a TrialLogs or TaskLogs
        request filters them (followed until the trial or task ends when asked)."""
        f = LogFilter(
            trial_id=trial_id,
            task_id=task_id,
            allocation_ids=tuple(getattr(request, "allocation_ids", ())),
            agent_ids=tuple(request.agent_ids),
            container_ids=tuple(request.container_ids),
            rank_ids=tuple(request.rank_ids),
            levels=tuple(tpb.LogLevel.Name(x).removeprefix("LOG_LEVEL_") for x in request.levels),
            stdtypes=tuple(request.stdtypes),
            sources=tuple(request.sources),
            search_text=request.search_text,
            after=request.timestamp_after.ToDatetime(UTC) if request.HasField("timestamp_after") else None,
            before=request.timestamp_before.ToDatetime(UTC) if request.HasField("timestamp_before") else None,
        )

        with self.deps.follow_slots.hold(request.follow):
            for row in read_logs(
                self.ctx,
                f,
                limit=request.limit,
                descending=request.order_by == common_pb2.ORDER_BY_DESC,
                follow=request.follow,
                is_done=self._ended(context, trial_id=trial_id, task_id=task_id),
            ):
                if not context.is_active():
                    return
                yield row

    @stream_rpc
    def TrialLogs(
        self, request: tpb.TrialLogsRequest, context: grpc.ServicerContext
    ) -> Iterator[tpb.TrialLogsResponse]:
        self.check_trial_access(context, request.trial_id)
        self.trial_message(request.trial_id)  # NotFound before streaming starts
        for row in self._log_rows(request, context, trial_id=request.trial_id):
            message = row.message if row.message.endswith("\n") else row.message + "\n"
            response = tpb.TrialLogsResponse(
                id=str(row.id),
                timestamp=convert.ts(row.timestamp),
                message=message,
                level=LEVEL_NAMES.get(row.level, tpb.LOG_LEVEL_INFO),
                trial_id=row.trial_id,
                agent_id=row.agent_id,
                container_id=row.container_id,
                log=message,
                source=row.source,
                stdtype=row.stdtype,
                allocation_id=row.allocation_id,
            )
            if row.rank is not None:
                response.rank_id = row.rank
            yield response

    @stream_rpc
    def TaskLogs(
        self, request: task_pb2.TaskLogsRequest, context: grpc.ServicerContext
    ) -> Iterator[task_pb2.TaskLogsResponse]:
        with self.ctx.db.read() as s:
            task = task_reads.task(s, request.task_id)
            trial_id = task_reads.trial_of_task(s, task.id) if task.kind == TaskKind.TRIAL else None
            access.check_task_readable(s, self.caller(context), task)
        # A trial's lines are read as TrialLogs reads them (by trial id), any other task's by task id.
        rows = (
            self._log_rows(request, context, trial_id=trial_id)
            if trial_id is not None
            else self._log_rows(request, context, task_id=task.id)
        )
        for row in rows:
            message = row.message if row.message.endswith("\n") else row.message + "\n"
            response = task_pb2.TaskLogsResponse(
                id=str(row.id),
                timestamp=convert.ts(row.timestamp),
                message=message,
                level=LEVEL_NAMES.get(row.level, tpb.LOG_LEVEL_INFO),
                task_id=request.task_id,
                allocation_id=row.allocation_id,
                agent_id=row.agent_id,
                container_id=row.container_id,
                log=message,
                source=row.source,
                stdtype=row.stdtype,
            )
            if row.rank is not None:
                response.rank_id = row.rank
            yield response
