"""The gRPC edge of the scheduler: convert the request, decide, convert the answer."""

from __future__ import annotations

import time

import grpc

from cairn.scheduler.v1 import scheduler_pb2 as pb
from cairn.scheduler.v1 import scheduler_pb2_grpc
from services.common.logging import get_logger
from services.common.status import abort_with
from services.scheduler.convert import decision_to_proto, state_from_proto
from services.scheduler.domain.errors import InvalidScheduleInput
from services.scheduler.domain.schedule import schedule
from services.scheduler.forecaster import Forecaster
from services.scheduler.session_table import SessionTable

log = get_logger(__name__)


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServiceServicer):
    def __init__(self, forecaster: Forecaster | None = None) -> None:
        self._sessions = SessionTable()
        # Forecasts run in a niced worker process, not against the passes (forecaster.py).
        self._forecaster = forecaster or Forecaster()

    def ScheduleChanges(
        self, request: pb.ScheduleChangesRequest, context: grpc.ServicerContext
    ) -> pb.ScheduleChangesResponse:
        started = time.monotonic()
        try:
            answer = self._sessions.handle(request)
        except InvalidScheduleInput as exc:
            log.warning("schedule changes refused", field=exc.field, problem=exc.problem)
            abort_with(context, exc)
        log.debug(
            "scheduled changes",
            snapshot=request.snapshot,
            agents=len(request.agents),
            requests=len(request.requests),
            removed=len(request.removed_requests),
            applied=answer.applied,
            assignments=len(answer.decision.assignments),
            elapsed_ms=round((time.monotonic() - started) * 1000, 2),
        )
        return answer

    def PredictStarts(
        self, request: pb.PredictStartsRequest, context: grpc.ServicerContext
    ) -> pb.PredictStartsResponse:
        started = time.monotonic()
        try:
            answer = self._forecaster.predict(request)
        except InvalidScheduleInput as exc:
            log.warning("start forecast refused", field=exc.field, problem=exc.problem)
            abort_with(context, exc)
        log.debug(
            "forecast starts",
            requests=len(request.state.requests),
            forecast=sum(1 for p in answer.predictions if p.start_in_seconds >= 0),
            truncated=answer.truncated,
            elapsed_ms=round((time.monotonic() - started) * 1000, 2),
        )
        return answer

    def Schedule(self, request: pb.ScheduleRequest, context: grpc.ServicerContext) -> pb.ScheduleResponse:
        started = time.monotonic()
        try:
            decision = schedule(state_from_proto(request))
        except InvalidScheduleInput as exc:
            log.warning("schedule request refused", field=exc.field, problem=exc.problem)
            abort_with(context, exc)
        # Debug level: a victim is named again on every pass until it has released its slots.
        for preemption in decision.preemptions:
            log.debug(
                "preempting",
                allocation_id=preemption.allocation_id,
                for_allocation_id=preemption.for_allocation_id,
            )
        log.debug(
            "scheduled",
            pools=len(request.pools),
            agents=len(request.agents),
            requests=len(request.requests),
            assignments=len(decision.assignments),
            preemptions=len(decision.preemptions),
            waiting=len(decision.waiting),
            elapsed_ms=round((time.monotonic() - started) * 1000, 2),
        )
        return decision_to_proto(decision)
