"""Client channels between Cairn processes: keepalives, message limits and the cluster token."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from typing import Any

import grpc

from services.common.metadata import CLUSTER_TOKEN_KEY

# Model definitions and checkpoint chunks travel in single messages; Determined allows 96 MiB.
MAX_MESSAGE_BYTES = 128 * 1024 * 1024

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Notice a dead peer on an idle long-lived stream within ~30 s.
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # Reconnect quickly after a peer restarts.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2_000),
]


class _CallDetails(
    namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class _MetadataInjector(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self._pairs = pairs

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _CallDetails(
            details.method,
            details.timeout,
            list(details.metadata or []) + self._pairs,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Callable[..., Any], details: Any, it: Any) -> Any:
        return continuation(self._details(details), it)

    def intercept_stream_stream(self, continuation: Callable[..., Any], details: Any, it: Any) -> Any:
        return continuation(self._details(details), it)


def internal_channel(address: str, cluster_token: str | None) -> grpc.Channel:
    """A channel to another Cairn process that presents the cluster token on every call."""
    channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    if cluster_token:
        channel = grpc.intercept_channel(channel, _MetadataInjector([(CLUSTER_TOKEN_KEY, cluster_token)]))
    return channel
