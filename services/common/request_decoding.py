"""Requests that cannot be decoded are the caller's error: INVALID_ARGUMENT naming the field, not the
INTERNAL that grpcio answers when a request deserializer raises (a string field that is not UTF-8,
a truncated message, nesting past protobuf's limit).

The interceptor wraps each method's deserializer so that a failure becomes a marker value, and the
method's behaviour so that the marker is answered before any handler code runs, but after the
interceptors before it: a server places it last (server.py: `with_request_checks`), so the
caller is established first, and a caller without credentials hears UNAUTHENTICATED, not what was
wrong with a body it may not send at all.

The REST gateway's requests come the same way: one it could not build from its HTTP form (a body
that is not JSON, a field of the wrong type, a body over its limit) is sent on with an empty
message and the REFUSED_REQUEST_KEY metadata, and refused here, once the caller is known; the
gateway then answers with what it found wrong.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

# Nested messages deeper than this are not walked to name a bad field (protobuf refuses past 100).
_MAX_WALK_DEPTH = 100
# Metadata the REST gateway adds to a request it could not build (the module's note).
REFUSED_REQUEST_KEY = "x-cairn-refused-request"
REFUSED_BY_GATEWAY = "request: refused by the REST gateway"


@dataclass(frozen=True)
class Undecodable:
    reason: str


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _bad_utf8_field(descriptor: Descriptor, data: bytes, depth: int = 0) -> str | None:
    """The path of the first string field in `data` (a `descriptor` message on the wire) that is not
    UTF-8, or None; gives up (None) on anything malformed."""
    if depth > _MAX_WALK_DEPTH:
        return None
    pos = 0
    try:
        while pos < len(data):
            key, pos = _varint(data, pos)
            number, wire_type = key >> 3, key & 7
            if wire_type == 0:
                _, pos = _varint(data, pos)
                continue
            if wire_type in (1, 5):
                pos += 8 if wire_type == 1 else 4
                continue
            if wire_type != 2:
                return None
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
            field = descriptor.fields_by_number.get(number)
            if field is None:
                continue
            if field.type == FieldDescriptor.TYPE_STRING:
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError:
                    return field.name
            elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type is not None:
                inner = _bad_utf8_field(field.message_type, value, depth + 1)
                if inner is not None:
                    return f"{field.name}.{inner}"
    except (ValueError, IndexError):
        return None
    return None


def safe_deserializer(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def run(data: bytes) -> Any:
        try:
            return deserialize(data)
        except (DecodeError, RecursionError, ValueError) as exc:
            message_type = getattr(deserialize, "__self__", None)
            descriptor = getattr(message_type, "DESCRIPTOR", None)
            if isinstance(descriptor, Descriptor):
                field = _bad_utf8_field(descriptor, data)
                if field is not None:
                    return Undecodable(f"{field}: not valid UTF-8 text")
                return Undecodable(f"request: not a valid {descriptor.full_name} message")
            return Undecodable(f"request: cannot be decoded ({type(exc).__name__})")

    return run


def _refuse(context: grpc.ServicerContext, request: Undecodable) -> None:
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)


def refused_by_gateway(context: grpc.ServicerContext) -> bool:
    return any(key == REFUSED_REQUEST_KEY for key, _ in context.invocation_metadata() or ())


def _checked_iterator(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    for request in requests:
        if isinstance(request, Undecodable):
            _refuse(context, request)
        yield request


def _unary_request(behaviour: Callable[..., Any]) -> Callable[..., Any]:
    def run(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            _refuse(context, request)
        if refused_by_gateway(context):
            _refuse(context, Undecodable(REFUSED_BY_GATEWAY))
        return behaviour(request, context)

    return run


class _Refused(Exception):
    """An undecodable message in a coroutine handler's request stream."""


def _stream_request(behaviour: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behaviour):
        return _async_stream_request(behaviour)

    def run(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
        if refused_by_gateway(context):
            _refuse(context, Undecodable(REFUSED_BY_GATEWAY))
        return behaviour(_checked_iterator(requests, context), context)

    return run


def _async_stream_request(behaviour: Callable[..., AsyncIterator[Any]]) -> Callable[..., Any]:
    """The same for a coroutine handler (an agent's stream on the asyncio server): its requests may
    be read by another task than the handler's, so an undecodable one ends the reading with
    _Refused, and the call is refused from the handler's own task once its answers stop."""

    async def run(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        if refused_by_gateway(context):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, REFUSED_BY_GATEWAY)
        refused: list[str] = []

        async def checked() -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, Undecodable):
                    refused.append(request.reason)
                    raise _Refused(request.reason)
                yield request

        try:
            async for answer in behaviour(checked(), context):
                yield answer
        except _Refused:
            pass
        if refused:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused[0])

    return run


class RequestDecodingInterceptor(grpc.ServerInterceptor):
    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None or not hasattr(handler, "_replace"):
            return handler
        wrap = _stream_request if handler.request_streaming else _unary_request
        changes: dict[str, Any] = {"request_deserializer": safe_deserializer(handler.request_deserializer)}
        for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
            behaviour = getattr(handler, kind)
            if behaviour is not None:
                changes[kind] = wrap(behaviour)
        return handler._replace(**changes)
