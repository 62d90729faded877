"""Server interceptors that check credentials before a handler runs.

Each wraps the method handler so the check runs in the handler's own thread, before the handler,
and the principal it finds is visible to the handler through `current_principal()`. A coroutine
handler (a stream on the asyncio server, server.py) is wrapped by a coroutine: the principal is set
in its task.
"""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, cast

import grpc

from services.common.metadata import CLUSTER_TOKEN_KEY, Metadata, metadata_value
from services.common.principal import Principal

# Methods every service answers without credentials: health checks and reflection.
ALWAYS_PUBLIC_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")


__all__ = [
    "AuthError",
    "AuthInterceptor",
    "Principal",
    "clear_principal",
    "cluster_token_authenticator",
    "current_principal",
]

_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("principal", default=None)


def current_principal() -> Principal | None:
    return _principal.get()


def clear_principal() -> None:
    """Forget the principal in the current context: a server's threads serve call after call, and
    an interceptor outside this one reads who called only after its check ran (or failed)."""
    _principal.set(None)


class AuthError(Exception):
    """Raised by an authenticate function: the message is sent to the caller."""

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.UNAUTHENTICATED) -> None:
        super().__init__(message)
        self.code = code


Authenticate = Callable[[str, Metadata], Principal]


def _wrap(handler: grpc.RpcMethodHandler, check: Callable[[grpc.ServicerContext], Principal]) -> Any:
    def run_check(context: grpc.ServicerContext) -> None:
        try:
            principal = check(context)
        except AuthError as exc:
            context.abort(exc.code, str(exc))
        _principal.set(principal)

    if handler.unary_unary:
        inner_uu = handler.unary_unary

        def unary_unary(request: Any, context: grpc.ServicerContext) -> Any:
            run_check(context)
            return inner_uu(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, handler.request_deserializer, handler.response_serializer
        )
    if handler.unary_stream:
        inner_us = handler.unary_stream

        def unary_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            run_check(context)
            yield from inner_us(request, context)

        return grpc.unary_stream_rpc_method_handler(
            unary_stream, handler.request_deserializer, handler.response_serializer
        )
    if handler.stream_unary:
        inner_su = handler.stream_unary

        def stream_unary(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            run_check(context)
            return inner_su(requests, context)

        return grpc.stream_unary_rpc_method_handler(
            stream_unary, handler.request_deserializer, handler.response_serializer
        )
    inner_ss = handler.stream_stream
    assert inner_ss is not None, "a method handler has exactly one behaviour"
    if inspect.isasyncgenfunction(inner_ss):
        inner_async = cast(Callable[..., AsyncIterator[Any]], inner_ss)

        async def stream_stream_async(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            # A coroutine handler on the asyncio server (an agent's stream): the check may read the
            # database, so it runs in a thread, not on the loop every stream shares. The principal
            # is set in this call's task, where the handler runs.
            try:
                principal = await asyncio.get_running_loop().run_in_executor(None, check, context)
            except AuthError as exc:
                await context.abort(exc.code, str(exc))
            _principal.set(principal)
            async for answer in inner_async(requests, context):
                yield answer

        return grpc.stream_stream_rpc_method_handler(
            stream_stream_async, handler.request_deserializer, handler.response_serializer
        )

    def stream_stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        run_check(context)
        yield from inner_ss(requests, context)

    return grpc.stream_stream_rpc_method_handler(
        stream_stream, handler.request_deserializer, handler.response_serializer
    )


class AuthInterceptor(grpc.ServerInterceptor):
    """Every method except `public_methods` (and health/reflection) needs credentials that
    `authenticate(method, metadata)` accepts; it raises AuthError otherwise."""

    def __init__(self, authenticate: Authenticate, public_methods: frozenset[str] = frozenset()) -> None:
        self._authenticate = authenticate
        self._public = public_methods

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or method in self._public or method.startswith(ALWAYS_PUBLIC_PREFIXES):
            return handler

        def check(context: grpc.ServicerContext) -> Principal:
            return self._authenticate(method, context.invocation_metadata() or ())

        return _wrap(handler, check)


def cluster_token_authenticator(expected: str) -> Authenticate:
    """Accept callers that present the cluster's shared token."""

    def authenticate(method: str, metadata: Metadata) -> Principal:
        presented = metadata_value(metadata, CLUSTER_TOKEN_KEY)
        if not presented or not hmac.compare_digest(presented.encode(), expected.encode()):
            raise AuthError(f"{method}: missing or wrong cluster token ({CLUSTER_TOKEN_KEY})")
        return Principal(internal=True, username="cluster")

    return authenticate
