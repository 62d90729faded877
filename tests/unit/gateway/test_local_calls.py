"""Local calls answer as the real gRPC server does: each case runs once over a channel to a server
started with the same handlers and interceptors, and once in-process, and both must agree."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import pytest
from google.protobuf import wrappers_pb2

from services.common.interceptors import AuthError, AuthInterceptor, current_principal
from services.common.local_calls import LocalCallError, LocalCalls, accepts_rendered_json
from services.common.metadata import Metadata, user_token
from services.common.principal import Principal
from services.common.server import start_server

SERVICE = "cairn.test.Echo"
PUBLIC = f"/{SERVICE}/Public"


def _echo(request: wrappers_pb2.StringValue, context: grpc.ServicerContext) -> wrappers_pb2.StringValue:
    principal = current_principal()
    if request.value == "abort":
        context.abort(grpc.StatusCode.NOT_FOUND, "nothing called abort")
    if request.value == "raise":
        raise RuntimeError("boom")
    if request.value == "none":
        return None  # type: ignore[return-value]
    if request.value == "set-code":
        context.set_code(grpc.StatusCode.FAILED_PRECONDITION)
        context.set_details("not now")
        return wrappers_pb2.StringValue()
    who = principal.username if principal else "nobody"
    return wrappers_pb2.StringValue(value=f"{who}:{request.value}")


def _public(request: wrappers_pb2.StringValue, context: grpc.ServicerContext) -> wrappers_pb2.StringValue:
    # A public method runs without a check: a principal seen here could only have leaked.
    principal = current_principal()
    return wrappers_pb2.StringValue(value=principal.username if principal else "nobody")


def _count(
    request: wrappers_pb2.StringValue, context: grpc.ServicerContext
) -> Iterator[wrappers_pb2.StringValue]:
    """Streams "who:1", "who:2", ... up to the request's number; "abort" and "raise" fail after
    the first message, "forever" streams until the caller goes away."""
    principal = current_principal()
    who = principal.username if principal else "nobody"
    if request.value == "json?":
        yield wrappers_pb2.StringValue(value=f"takes rendered json: {accepts_rendered_json(context)}")
        return
    yield wrappers_pb2.StringValue(value=f"{who}:1")
    if request.value == "abort":
        context.abort(grpc.StatusCode.OUT_OF_RANGE, "enough")
    if request.value == "raise":
        raise RuntimeError("stream boom")
    if request.value == "forever":
        while context.is_active():
            time.sleep(0.01)
        return
    for n in range(2, int(request.value or "1") + 1):
        yield wrappers_pb2.StringValue(value=f"{who}:{n}")


def _register(server: Any) -> Sequence[str]:
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            fn,
            request_deserializer=wrappers_pb2.StringValue.FromString,
            response_serializer=wrappers_pb2.StringValue.SerializeToString,
        )
        for name, fn in (("Echo", _echo), ("Public", _public))
    }
    handlers["Count"] = grpc.unary_stream_rpc_method_handler(
        _count,
        request_deserializer=wrappers_pb2.StringValue.FromString,
        response_serializer=wrappers_pb2.StringValue.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    return [SERVICE]


def _authenticate(method: str, metadata: Metadata) -> Principal:
    token = user_token(metadata)
    if token != "good":
        raise AuthError(f"{method}: bad token")
    return Principal(user_id=1, username="alice")


INTERCEPTORS = [AuthInterceptor(_authenticate, frozenset({PUBLIC}))]


def _auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    server = start_server("echo", _register, host="127.0.0.1", port=0, interceptors=INTERCEPTORS)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
            yield ch
    finally:
        server.server.stop(grace=0)


def _over_channel(channel: grpc.Channel, method: str, value: str, token: str) -> tuple[Any, ...]:
    call = channel.unary_unary(
        method,
        request_serializer=wrappers_pb2.StringValue.SerializeToString,
        response_deserializer=wrappers_pb2.StringValue.FromString,
    )
    try:
        reply = call(wrappers_pb2.StringValue(value=value), metadata=_auth(token))
    except grpc.RpcError as exc:
        return ("error", exc.code(), exc.details())  # type: ignore[attr-defined]
    return ("ok", reply.value)


def _in_process(local: LocalCalls, method: str, value: str, token: str) -> tuple[Any, ...]:
    try:
        reply = local.unary(
            method,
            wrappers_pb2.StringValue(value=value),
            _auth(token),
            timeout_s=5,
        )
    except LocalCallError as exc:
        return ("error", exc.code(), exc.details())
    assert isinstance(reply, wrappers_pb2.StringValue)
    return ("ok", reply.value)


@pytest.mark.parametrize(
    ("method", "value", "token"),
    [
        (f"/{SERVICE}/Echo", "hello", "good"),
        (f"/{SERVICE}/Echo", "hello", "bad"),
        (f"/{SERVICE}/Echo", "abort", "good"),
        (f"/{SERVICE}/Echo", "set-code", "good"),
        (f"/{SERVICE}/Echo", "none", "good"),
        (PUBLIC, "", "bad"),
        (f"/{SERVICE}/Missing", "", "good"),
    ],
)
def test_local_calls_answer_as_the_server_does(
    channel: grpc.Channel, method: str, value: str, token: str
) -> None:
    local = LocalCalls(_register, INTERCEPTORS)
    assert _in_process(local, method, value, token) == _over_channel(channel, method, value, token)


def test_an_escaping_exception_is_unknown_like_the_server(channel: grpc.Channel) -> None:
    local = LocalCalls(_register, INTERCEPTORS)
    served = _over_channel(channel, f"/{SERVICE}/Echo", "raise", "good")
    local_answer = _in_process(local, f"/{SERVICE}/Echo", "raise", "good")
    assert served[:2] == local_answer[:2] == ("error", grpc.StatusCode.UNKNOWN)
    assert "boom" in local_answer[2]


def test_a_principal_does_not_leak_into_the_next_call() -> None:
    local = LocalCalls(_register, INTERCEPTORS)
    assert _in_process(local, f"/{SERVICE}/Echo", "x", "good") == ("ok", "alice:x")
    # Same thread, next call: a public method must not see the previous caller.
    assert _in_process(local, PUBLIC, "", "none") == ("ok", "nobody")


def _stream_over_channel(channel: grpc.Channel, value: str, token: str) -> list[Any]:
    call = channel.unary_stream(
        f"/{SERVICE}/Count",
        request_serializer=wrappers_pb2.StringValue.SerializeToString,
        response_deserializer=wrappers_pb2.StringValue.FromString,
    )
    seen: list[Any] = []
    try:
        for reply in call(wrappers_pb2.StringValue(value=value), metadata=_auth(token)):
            seen.append(reply.value)
    except grpc.RpcError as exc:
        seen.append((exc.code(), exc.details()))  # type: ignore[attr-defined]
    return seen


def _stream_in_process(local: LocalCalls, value: str, token: str) -> list[Any]:
    seen: list[Any] = []
    try:
        stream = local.stream(
            f"/{SERVICE}/Count",
            wrappers_pb2.StringValue(value=value),
            _auth(token),
        )
        for reply in stream:
            assert isinstance(reply, wrappers_pb2.StringValue)
            seen.append(reply.value)
    except LocalCallError as exc:
        seen.append((exc.code(), exc.details()))
    return seen


@pytest.mark.parametrize(("value", "token"), [("3", "good"), ("3", "bad"), ("abort", "good")])
def test_local_streams_answer_as_the_server_does(channel: grpc.Channel, value: str, token: str) -> None:
    local = LocalCalls(_register, INTERCEPTORS)
    assert _stream_in_process(local, value, token) == _stream_over_channel(channel, value, token)


def test_an_exception_mid_stream_is_unknown_after_the_messages_sent() -> None:
    seen = _stream_in_process(LocalCalls(_register, INTERCEPTORS), "raise", "good")
    assert seen[0] == "alice:1"
    assert seen[1][0] == grpc.StatusCode.UNKNOWN and "stream boom" in seen[1][1]


def test_cancel_from_another_thread_ends_a_waiting_stream() -> None:
    stream = LocalCalls(_register, INTERCEPTORS).stream(
        f"/{SERVICE}/Count", wrappers_pb2.StringValue(value="forever"), (("authorization", "Bearer good"),)
    )
    assert next(stream).value == "alice:1"  # type: ignore[attr-defined]
    threading.Timer(0.1, stream.cancel).start()
    started = time.monotonic()
    assert list(stream) == []
    assert time.monotonic() - started < 5
    stream.close()


def test_only_a_caller_that_asks_for_rendered_json_is_offered_it(channel: grpc.Channel) -> None:
    local = LocalCalls(_register, INTERCEPTORS)
    method, ask = f"/{SERVICE}/Count", wrappers_pb2.StringValue(value="json?")
    asked = local.stream(method, ask, _auth("good"), rendered_json=True)
    assert [m.value for m in asked] == ["takes rendered json: True"]  # type: ignore[attr-defined]
    assert _stream_in_process(local, "json?", "good") == ["takes rendered json: False"]
    assert _stream_over_channel(channel, "json?", "good") == ["takes rendered json: False"]
