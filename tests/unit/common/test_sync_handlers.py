"""Synchronous handlers on the asyncio server (services/common/sync_handlers.py), over a real
server and channel: the principal an interceptor sets reaches the handler, abort answers the status
it names, a bidirectional synchronous handler reads and answers, and a server stream whose client
cancels it ends at the handler's next look at is_active() (or is closed at its yield), with its
callbacks run; a service registered as generated code registers it is served, with health and
reflection."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.common.interceptors import AuthInterceptor, current_principal
from services.common.principal import Principal
from services.common.server import ServiceServer, start_server


def _same(data: bytes) -> bytes:
    return data


class _Handlers:
    def __init__(self) -> None:
        self.callback_ran = threading.Event()
        self.stream_ended = threading.Event()
        self.seen: list[Any] = []

    def unary(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        if request == b"bad":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request: bad")
        principal = current_principal()
        return (principal.username if principal is not None else "").encode()

    def follow(self, _request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        context.add_callback(self.callback_ran.set)
        try:
            for _ in range(400):  # bounded: 20 s at most
                if not context.is_active():
                    self.seen.append("client gone")
                    return
                self.seen.append(current_principal())
                try:
                    yield b"x"
                except GeneratorExit:
                    # The client left while this generator sat at its yield: the server closed it.
                    self.seen.append("closed")
                    raise
                time.sleep(0.05)
        finally:
            self.stream_ended.set()

    def echo(self, requests: Iterator[bytes], _context: grpc.ServicerContext) -> Iterator[bytes]:
        for request in requests:
            yield request + b"!"

    def register(self, server: Any) -> list[str]:
        server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    "t.T",
                    {
                        "Unary": grpc.unary_unary_rpc_method_handler(self.unary, _same, _same),
                        "Follow": grpc.unary_stream_rpc_method_handler(self.follow, _same, _same),
                        "Echo": grpc.stream_stream_rpc_method_handler(self.echo, _same, _same),
                    },
                )
            ]
        )
        return ["t.T"]


@pytest.fixture
def served() -> Iterator[tuple[_Handlers, grpc.Channel]]:
    handlers = _Handlers()
    auth = AuthInterceptor(lambda _method, _metadata: Principal(username="alice"))
    server: ServiceServer = start_server(
        "sync-handlers", handlers.register, host="127.0.0.1", port=0, interceptors=[auth], asyncio_server=True
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield handlers, channel
    finally:
        channel.close()
        server.stop(grace=1.0)


def test_the_principal_and_an_abort_reach_as_on_the_thread_pool_server(
    served: tuple[_Handlers, grpc.Channel],
) -> None:
    _, channel = served
    unary: Any = channel.unary_unary("/t.T/Unary")
    assert unary(b"x", timeout=10) == b"alice"
    with pytest.raises(grpc.RpcError) as refused:
        unary(b"bad", timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == "request: bad"


def test_a_synchronous_handler_reads_its_request_stream(served: tuple[_Handlers, grpc.Channel]) -> None:
    _, channel = served
    echo: Any = channel.stream_stream("/t.T/Echo")
    answers = echo(iter([b"a", b"b", b"c"]), timeout=10)
    assert list(answers) == [b"a!", b"b!", b"c!"]


def test_a_follower_whose_client_left_returns_and_its_callbacks_run(
    served: tuple[_Handlers, grpc.Channel],
) -> None:
    handlers, channel = served
    follow: Any = channel.unary_stream("/t.T/Follow")
    call = follow(b"", timeout=30)
    for count, _answer in enumerate(call, start=1):
        if count == 3:
            call.cancel()
            break
    assert handlers.stream_ended.wait(5), "the handler went on after its client left"
    assert handlers.callback_ran.wait(5)
    # Either end is the handler's: it saw is_active() False mid-step, or it was closed at its yield
    # (which of the two depends on where the cancel finds it).
    assert handlers.seen[-1] in ("client gone", "closed")
    # Each step of the stream ran with the principal its first step was given.
    assert {p.username for p in handlers.seen[:-1]} == {"alice"}


def test_a_service_registered_as_generated_code_registers_it_is_served_with_health_and_reflection() -> None:
    """Generated `add_*Servicer_to_server` functions add a generic handler and registered methods;
    on the asyncio server only the generic handler is kept (server._GenericHandlersOnly): every
    method, the health check and reflection still answer."""
    handlers = _Handlers()
    methods = {
        "Unary": grpc.unary_unary_rpc_method_handler(handlers.unary, _same, _same),
        "Echo": grpc.stream_stream_rpc_method_handler(handlers.echo, _same, _same),
    }
    registered: list[str] = []

    # Had these reached the server, they would answer instead (grpc.aio looks a registered method
    # up before the generic handlers): the generic handler answering shows they were left out.
    left_out = {
        "Unary": grpc.unary_unary_rpc_method_handler(lambda _r, _c: b"registered", _same, _same),
        "Echo": methods["Echo"],
    }

    def register(server: Any) -> list[str]:
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.Generated", methods),))
        server.add_registered_method_handlers("t.Generated", left_out)
        registered.append("t.Generated")
        return ["t.Generated"]

    server = start_server("generated", register, host="127.0.0.1", port=0, asyncio_server=True)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        assert registered == ["t.Generated"]
        unary: Any = channel.unary_unary("/t.Generated/Unary")
        assert unary(b"x", timeout=10) == b""  # no interceptor set a principal
        echo: Any = channel.stream_stream("/t.Generated/Echo")
        assert list(echo(iter([b"a", b"b"]), timeout=10)) == [b"a!", b"b!"]
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "t.Generated"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        listing = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
        )
        names = {s.name for answer in listing for s in answer.list_services_response.service}
        assert {"t.Generated", "grpc.health.v1.Health"} <= names
    finally:
        channel.close()
        server.stop(grace=1.0)
