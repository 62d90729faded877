"""A real HTTP server with the real REST gateway, dialing a real gRPC server on port 0 that
serves a few Cairn methods with behaviour the tests control: errors by code, streams of a given
length that fail or run until cancelled, and an echo of the metadata the gateway forwarded. The
same server serves the master's internal gateway service (the real servicer, behind the key check
the master makes) over scripted answers, for worker processes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from cairn.api.v1 import api_pb2, api_pb2_grpc, auth_pb2, experiment_pb2, master_pb2, task_pb2, trial_pb2
from services.common.interceptors import AuthError, AuthInterceptor
from services.common.metadata import GATEWAY_KEY_KEY, Metadata, metadata_value
from services.common.principal import Principal
from services.common.server import with_request_checks
from services.master.domain.allocations.proxy_access import ProxyTarget
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.internal_service import GatewayServicer, register_gateway_service
from services.master.gateway.proxy_targets import Refused, Resolution
from services.master.gateway.public_server import PublicHttpServer, start_public_http
from services.master.gateway.rest_gateway import rest_routes


@dataclass
class Observed:
    """What the scripted service saw, for the tests to check."""

    cancelled: threading.Event = field(default_factory=threading.Event)
    cancelled_trials: set[int] = field(default_factory=set)  # the followed streams that were cancelled
    last_metadata: dict[str, str] = field(default_factory=dict)


class ScriptedCairn(api_pb2_grpc.CairnServicer):
    """GetTrial(trial_id) aborts with status code `trial_id` when it is a gRPC code other than OK;
    TrialLogs streams `limit` lines, then fails with NOT_FOUND when search_text is "fail", or
    keeps going until cancelled when `follow` is set (for 2 s at most when search_text is
    "briefly")."""

    def __init__(self, observed: Observed) -> None:
        self.observed = observed

    def _remember(self, context: grpc.ServicerContext) -> dict[str, str]:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        self.observed.last_metadata = metadata
        return metadata

    def GetMaster(self, request: Any, context: grpc.ServicerContext) -> master_pb2.GetMasterResponse:
        return master_pb2.GetMasterResponse(version="test", cluster_name="scripted")

    def GetTasks(self, request: Any, context: grpc.ServicerContext) -> task_pb2.GetTasksResponse:
        response = task_pb2.GetTasksResponse()
        response.allocation_id_to_summary["a.1"].CopyFrom(
            task_pb2.AllocationSummary(task_id="a", allocation_id="a.1", name="Checkpoint GC (Experiment 1)")
        )
        return response

    def Login(self, request: auth_pb2.LoginRequest, context: grpc.ServicerContext) -> auth_pb2.LoginResponse:
        if request.password != "right":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid credentials")
        return auth_pb2.LoginResponse(token=f"token-of-{request.username}")

    def Logout(self, request: Any, context: grpc.ServicerContext) -> auth_pb2.LogoutResponse:
        self._remember(context)
        return auth_pb2.LogoutResponse()

    def GetMe(self, request: Any, context: grpc.ServicerContext) -> auth_pb2.GetMeResponse:
        metadata = self._remember(context)
        if metadata.get("authorization") != "Bearer token-of-ann":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing credentials")
        return auth_pb2.GetMeResponse(user=auth_pb2.User(id=7, username="ann", active=True))

    def GetExperiments(
        self, request: experiment_pb2.GetExperimentsRequest, context: grpc.ServicerContext
    ) -> experiment_pb2.GetExperimentsResponse:
        # Echo the request, so the tests see how the query string was read.
        return experiment_pb2.GetExperimentsResponse(
            experiments=[experiment_pb2.Experiment(id=1, description=json.dumps(_fields(request)))]
        )

    def GetTrial(self, request: trial_pb2.GetTrialRequest, context: grpc.ServicerContext) -> Any:
        self._remember(context)
        for code in grpc.StatusCode:
            if code.value[0] == request.trial_id and code != grpc.StatusCode.OK:
                context.abort(code, f"scripted {code.name}")
        return trial_pb2.GetTrialResponse(
            trial=trial_pb2.Trial(id=request.trial_id, total_checkpoint_size=2**40)
        )

    def TrialLogs(self, request: trial_pb2.TrialLogsRequest, context: grpc.ServicerContext) -> Iterator[Any]:
        ended_on_its_own = threading.Event()
        gone = threading.Event()
        if request.follow:
            # Watched from before the first line: a client that leaves while a line is on its way
            # makes gRPC's server stop iterating this generator, so code after that `yield` would
            # never run (on a busy host the sent line reaches the client before the server's
            # thread wakes to see the cancellation). The call's end is seen here in every case.
            def call_ended() -> None:
                if not ended_on_its_own.is_set():
                    self.observed.cancelled_trials.add(request.trial_id)
                    self.observed.cancelled.set()
                gone.set()

            if not context.add_callback(call_ended):
                call_ended()  # the call had already ended
        for i in range(request.limit):
            yield trial_pb2.TrialLogsResponse(id=str(i), trial_id=request.trial_id, message=f"line {i}\n")
        if request.search_text == "fail":
            ended_on_its_own.set()
            context.abort(grpc.StatusCode.NOT_FOUND, "the trial went away")
        # search_text "briefly": a followed stream that ends on its own after 2 s.
        if request.follow and not gone.wait(timeout=2 if request.search_text == "briefly" else 30):
            ended_on_its_own.set()


def _fields(request: Any) -> dict[str, Any]:
    return json_format.MessageToDict(request, preserving_proto_field_name=True)


@dataclass
class Gateway:
    base: str
    observed: Observed
    http: PublicHttpServer


GATEWAY_KEY = "the-boots-key"


class ScriptedHealth:
    def database_ok(self) -> bool:
        return True

    def metrics_text(self) -> str:
        return "scripted_gauge 1\n"


def scripted_targets(task_id: str, session_token: str | None) -> Resolution:
    if session_token is None:
        return Refused(1, "authentication required: log in to open a task")
    return ProxyTarget(address="127.0.0.1:1", tcp=False)


def _gateway_key_only(method: str, metadata: Metadata) -> Principal:
    """The master's check for its gateway service (servicers/auth.py); everything else passes."""
    if "GatewayService" in method and metadata_value(metadata, GATEWAY_KEY_KEY) != GATEWAY_KEY:
        raise AuthError("internal", code=grpc.StatusCode.PERMISSION_DENIED)
    return Principal(internal=True)


def start_scripted() -> tuple[grpc.Server, int, Observed]:
    """The scripted service on a free port: (server, port, what it saw)."""
    observed = Observed()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=16),
        # As every Cairn server orders them: who is calling, then the request (server.py).
        interceptors=with_request_checks([AuthInterceptor(_gateway_key_only)]),
    )
    # Only some methods are served: the others answer UNIMPLEMENTED, as gRPC's base class does.
    scripted = ScriptedCairn(observed)  # type: ignore[abstract]
    api_pb2_grpc.add_CairnServicer_to_server(scripted, server)
    register_gateway_service(server, GatewayServicer(scripted_targets, ScriptedHealth()))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port, observed


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    server, port, observed = start_scripted()
    http = start_public_http("127.0.0.1", 0, HttpLimits(), None)
    http.routes.extend(rest_routes(http, api_pb2.DESCRIPTOR.services_by_name["Cairn"], "127.0.0.1", port))
    try:
        yield Gateway(f"http://127.0.0.1:{http.server_address[1]}", observed, http)
    finally:
        http.shutdown()
        http.server_close()
        server.stop(grace=None)
