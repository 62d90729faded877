"""The master's side of its internal contract with the public port's worker processes
(proto/cairn/gateway/v1/gateway.proto): what the master's own process answers for the task proxy,
/healthz and /metrics, answered over gRPC to a worker that holds no domain state. Every call
presents the per-boot gateway key (servicers/auth.py checks it before anything runs here)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from http import HTTPStatus

import grpc

from cairn.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.master.gateway.master_routes import HealthSource
from services.master.gateway.proxy_targets import Refused, Resolve
from services.master.gateway.stream_relay import StreamConversations

SERVICE_NAME = gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"].full_name


class GatewayServicer(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(
        self, targets: Resolve, health: HealthSource, streams: StreamConversations | None = None
    ) -> None:
        """`targets`: the master's own (proxy_targets.LocalTargets); `streams`: the streaming
        updates of websockets the workers take, with the `streaming_updates` switch on."""
        self._targets = targets
        self._health = health
        self.streams = streams

    def ResolveProxy(
        self, request: gateway_pb2.ResolveProxyRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.ResolveProxyResponse:
        found = self._targets(request.task_id, request.session_token or None)
        if isinstance(found, Refused):
            refused = gateway_pb2.ProxyRefused(refusal=found.refusal, message=found.message)
            return gateway_pb2.ResolveProxyResponse(refused=refused)
        target = gateway_pb2.ProxyTarget(
            address=found.address, tcp=found.tcp, service_credential=found.service_credential or ""
        )
        return gateway_pb2.ResolveProxyResponse(target=target)

    def Health(
        self, request: gateway_pb2.HealthRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.HealthResponse:
        return gateway_pb2.HealthResponse(database_ok=self._health.database_ok())

    def Metrics(
        self, request: gateway_pb2.MetricsRequest, context: grpc.ServicerContext
    ) -> gateway_pb2.MetricsResponse:
        return gateway_pb2.MetricsResponse(text=self._health.metrics_text())

    def Stream(
        self, request_iterator: Iterator[gateway_pb2.StreamFromClient], context: grpc.ServicerContext
    ) -> Iterator[gateway_pb2.StreamToClient]:
        if self.streams is None:  # the switch is off: /stream is not a route
            refused = gateway_pb2.StreamRefused(status=HTTPStatus.NOT_FOUND, message="not found")
            yield gateway_pb2.StreamToClient(refused=refused)
            return
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("message") != "open":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a stream opens with StreamOpen")
        token = first.open.session_token or None
        texts = (r.text for r in request_iterator if r.WhichOneof("message") == "text")

        def on_end(fn: Callable[[], None]) -> None:
            context.add_callback(fn)

        yield from self.streams.converse(token, texts, on_end)


def register_gateway_service(server: grpc.Server, servicer: GatewayServicer) -> str:
    """Adds the service to `server`; its full name, for the server's list of services."""
    gateway_pb2_grpc.add_GatewayServiceServicer_to_server(servicer, server)
    return SERVICE_NAME
