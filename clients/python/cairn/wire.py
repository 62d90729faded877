"""What every Cairn gRPC client and server shares on the wire: message limits, keepalives, an
interceptor that adds metadata and deadlines to calls, and reading protobuf Structs.

It lives in the client package (which every service depends on) so that the CLI, the Core API and
the services use one set of settings.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from google.protobuf import struct_pb2

# Model definitions and checkpoint chunks travel in single messages; Determined allows 96 MiB.
MAX_MESSAGE_BYTES = 128 * 1024 * 1024

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Streams (log follows, signal watches, agent sessions) sit idle for long: keepalives notice a
    # vanished peer within ~30 s.
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # Reconnect quickly after a peer restarts.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 5_000),
]


class _CallDetails(
    namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,
):
    pass


class CallDefaults(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds `metadata` to every call, and `unary_timeout` as the deadline of unary calls that set
    none (streams run without one: they follow logs or hold sessions)."""

    def __init__(self, metadata: Sequence[tuple[str, str]], unary_timeout: float | None = None) -> None:
        self._metadata = list(metadata)
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

    def intercept_stream_unary(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        return continuation(self._details(details, self._unary_timeout), requests)

    def intercept_stream_stream(self, continuation: Callable[..., Any], details: Any, requests: Any) -> Any:
        return continuation(self._details(details, None), requests)


def channel_with(
    target: str,
    metadata: Sequence[tuple[str, str]],
    unary_timeout: float | None = None,
    credentials: grpc.ChannelCredentials | None = None,
) -> tuple[grpc.Channel, grpc.Channel]:
    """(the channel to call through, the underlying channel to close). With `credentials` the
    channel is TLS (cairn/tls.py builds verifying ones); without, plaintext."""
    if credentials is not None:
        base = grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)
    else:
        base = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
    if not metadata and unary_timeout is None:
        return base, base
    return grpc.intercept_channel(base, CallDefaults(metadata, unary_timeout)), base


def value_to_python(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        return value.number_value
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return struct_to_python(value.struct_value)
    if kind == "list_value":
        return [value_to_python(item) for item in value.list_value.values]
    return None


def struct_to_python(message: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as Python values. Walked by hand: json_format raises on NaN and infinities, which
    metrics may hold and specs must be able to name in an error."""
    return {key: value_to_python(item) for key, item in message.fields.items()}


def whole_numbers(value: Any) -> Any:
    """A Struct's numbers are all doubles: 8080.0 is read back as 8080, as the user wrote it."""
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def python_to_struct(values: dict[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(values)
    return message
