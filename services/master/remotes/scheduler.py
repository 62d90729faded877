"""Client of the SchedulerService.

One scheduler serves a master: it keeps the master's session between passes (ScheduleChanges), so
its address names one process (one replica behind a Kubernetes Service, deploy/k8s/base). The one
channel keeps one connection to it. Should a call reach a scheduler without the session (it
restarted, or a second replica answered), the answer says "not applied" and the next request is the
whole cluster's snapshot (scheduling.py), never a wrong decision: a switch costs one snapshot pass."""

from __future__ import annotations

import grpc

from cairn.scheduler.v1 import scheduler_pb2 as pb
from cairn.scheduler.v1 import scheduler_pb2_grpc
from services.common.channels import internal_channel
from services.master.remotes.errors import translate

CALL_TIMEOUT_S = 10.0
# A forecast plays many decisions; the job listing waits for it at most this long.
FORECAST_TIMEOUT_S = 20.0


class SchedulerClient:
    def __init__(self, address: str, cluster_token: str | None) -> None:
        self.address = address
        self._channel = internal_channel(address, cluster_token)
        self._stub = scheduler_pb2_grpc.SchedulerServiceStub(self._channel)

    def schedule(self, request: pb.ScheduleRequest) -> pb.ScheduleResponse:
        try:
            return self._stub.Schedule(request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise translate("scheduler", self.address, exc) from None

    def schedule_changes(self, request: pb.ScheduleChangesRequest) -> pb.ScheduleChangesResponse:
        try:
            return self._stub.ScheduleChanges(request, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            if isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                raise NotImplementedError("the scheduler predates sessions (ScheduleChanges)") from None
            raise translate("scheduler", self.address, exc) from None

    def predict_starts(self, request: pb.PredictStartsRequest) -> pb.PredictStartsResponse:
        try:
            return self._stub.PredictStarts(request, timeout=FORECAST_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise translate("scheduler", self.address, exc) from None

    def shutdown(self) -> None:
        self._channel.close()
