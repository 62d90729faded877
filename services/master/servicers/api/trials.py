"""Trials: read, kill, and their logs (a server stream that can follow the trial)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC
from typing import Any

import grpc

from cairn.api.v1 import common_pb2, task_pb2
from cairn.api.v1 import trial_pb2 as tpb
from services.master.domain import experiments as experiment_lifecycle
from services.master.domain import trials as trial_lifecycle
from services.master.domain.errors import NotFound, PermissionDenied
from services.master.domain.logs import LogFilter, read_logs
from services.master.domain.reads import tasks as task_reads
from services.master.domain.reads import trials as reads
from services.master.domain.states import TERMINAL, RunState
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
        """Trial code may only touch its own trial."""
        principal = self.caller(context)
        if principal.user_id is not None or principal.allocation_id is None:
            return
        with self.ctx.db.read() as s:
            if not reads.trial_exists(s, trial_id):
                raise NotFound(f"trial {trial_id} not found")
            own = reads.trial_of_allocation(s, principal.allocation_id)
        if own != trial_id:
            raise PermissionDenied(
                f"allocation {principal.allocation_id} does not belong to trial {trial_id}"
            )

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
            experiment_lifecycle.check_can_modify(principal, exp)
            trial_lifecycle.stop(self.ctx, w, trial, exp, RunState.STOPPING_KILLED)
        return tpb.KillTrialResponse()

    def _log_rows(self, request: Any, trial_id: int, context: grpc.ServicerContext) -> Iterator[Any]:
        """The trial's log lines as a TrialLogs or TaskLogs request filters them (followed until the
        trial ends when asked)."""
        f = LogFilter(
            trial_id=trial_id,
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

        def trial_done() -> bool:
            with self.ctx.db.read() as s:
                state = reads.trial_state(s, trial_id)
            return state is None or state in TERMINAL or not context.is_active()

        for row in read_logs(
            self.ctx,
            f,
            limit=request.limit,
            descending=request.order_by == common_pb2.ORDER_BY_DESC,
            follow=request.follow,
            is_done=trial_done,
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
        for row in self._log_rows(request, request.trial_id, context):
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
            trial_id = task_reads.trial_of_task(s, request.task_id)
        self.check_trial_access(context, trial_id)
        for row in self._log_rows(request, trial_id, context):
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
