"""The client's gRPC channel to the master: message limits, keepalives, the bearer token and a
default deadline on unary calls."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from typing import Any

import grpc

# Model definitions go up in one message; the master accepts 128 MiB (Determined: 96 MiB).
MAX_MESSAGE_BYTES = 128 * 1024 * 1024
# A unary call that takes longer than this has hung; streams (logs) run without a deadline.
DEFAULT_CALL_TIMEOUT_S = 120.0

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # `trial logs --follow` can sit idle for minutes; keepalives notice a vanished master.
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


class _CallDetails(
    namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class _CallDefaults(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call, and a deadline to unary ones."""

    def __init__(self, token: str | None, unary_timeout: float | None) -> None:
        self._metadata = [("authorization", f"Bearer {token}")] if token else []
        self._unary_timeout = unary_timeout

    def _details(self, details: grpc.ClientCallDetails, timeout: float | None) -> grpc.ClientCallDetails:
        return _CallDetails(
            details.method,
            details.timeout if details.timeout is not None else timeout,
            list(details.metadata or []) + self._metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details, self._unary_timeout), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details, None), request)


def open_channel(
    target: str, token: str | None, unary_timeout: float | None = DEFAULT_CALL_TIMEOUT_S
) -> tuple[grpc.Channel, grpc.Channel]:
    """(the channel to call through, the underlying channel to close)."""
    base = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
    return grpc.intercept_channel(base, _CallDefaults(token, unary_timeout)), base
