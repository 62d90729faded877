"""A worker process's line to the master (proto/cairn/gateway/v1/gateway.proto): where the task
proxy takes a caller, the database's health and the cluster's gauges, asked over the master's gRPC
port with the per-boot gateway key the master handed the worker on its stdin. A master that does
not answer makes MasterUnreachable, which the worker answers 503 with Retry-After."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from cairn.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cairn.metadata_keys import GATEWAY_KEY_KEY
from cairn.wire import CHANNEL_OPTIONS
from services.common.logging import get_logger
from services.master.domain.allocations.proxy_access import ProxyTarget
from services.master.gateway.master_routes import MasterUnreachable
from services.master.gateway.proxy_targets import Refused, Resolution
from services.master.gateway.upstream import dial_address

log = get_logger(__name__)

# The master answers these from memory or one short read: a slow answer means it is in trouble,
# and the HTTP client is better told so (503) than kept waiting.
CALL_TIMEOUT_S = 10.0
# A metrics scrape reads a little more.
METRICS_TIMEOUT_S = 30.0


class MasterLink:
    def __init__(self, grpc_host: str, grpc_port: int, gateway_key: str) -> None:
        self.channel = grpc.insecure_channel(dial_address(grpc_host, grpc_port), options=CHANNEL_OPTIONS)
        self._stub = gateway_pb2_grpc.GatewayServiceStub(self.channel)
        self._metadata = ((GATEWAY_KEY_KEY, gateway_key),)

    def resolve_proxy(self, task_id: str, session_token: str | None) -> Resolution:
        request = gateway_pb2.ResolveProxyRequest(task_id=task_id, session_token=session_token or "")
        answer = self._call("ResolveProxy", request, CALL_TIMEOUT_S)
        if answer.WhichOneof("answer") == "refused":
            return Refused(answer.refused.refusal, answer.refused.message)
        target = answer.target
        return ProxyTarget(target.address, target.tcp, target.service_credential or None)

    def database_ok(self) -> bool:
        return bool(self._call("Health", gateway_pb2.HealthRequest(), CALL_TIMEOUT_S).database_ok)

    def metrics_text(self) -> str:
        return str(self._call("Metrics", gateway_pb2.MetricsRequest(), METRICS_TIMEOUT_S).text)

    def open_stream(self, requests: Iterator[gateway_pb2.StreamFromClient]) -> Any:
        """A relayed /stream: the call's answers (iterate them; cancel() ends it)."""
        return self._stub.Stream(requests, metadata=self._metadata)

    def _call(self, method: str, request: Any, timeout: float) -> Any:
        """One call of the gateway service with the worker's key; MasterUnreachable when it fails."""
        try:
            return getattr(self._stub, method)(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _unreachable(method, exc) from None

    def close(self) -> None:
        self.channel.close()


def _unreachable(method: str, exc: grpc.RpcError) -> MasterUnreachable:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    log.warning("the master's gateway service did not answer", method=method, code=str(code), error=details)
    return MasterUnreachable(details or str(code))
