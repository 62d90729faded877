"""Synchronous gRPC handlers served by an asyncio server, each as a coroutine that runs it in a
thread pool, with the context a synchronous handler expects.

gRPC's own way (the asyncio server's `migration_thread_pool`) hands a synchronous handler a context
without `is_active()`, `code()` or `details()`, and its `add_callback` callbacks do not run when the
client goes away: a follower (a log follow, a signal wait) would hold its thread until its own
timeout. Here the handler's context follows the asyncio call: `is_active()` is False once the call
is done (the client cancelled, or its deadline passed), callbacks run then, and `abort` ends the
call with the status it names, as on the thread-pool server.

Every call keeps one contextvars.Context for all the steps of its handler (the first step of a
streaming handler may set who is calling, interceptors.py, and the later ones read it).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Executor
from typing import Any

import grpc

from services.common.logging import get_logger

log = get_logger(__name__)

_END = object()


class _Aborted(Exception):
    """Raised in the handler's thread by abort(): the coroutine ends the call with its status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class ThreadContext:
    """What a synchronous handler is given: the asyncio call's context, from a pool thread."""

    def __init__(self, call: grpc.aio.ServicerContext, loop: asyncio.AbstractEventLoop) -> None:
        self._call = call
        self._loop = loop
        self._done = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._code: grpc.StatusCode | None = None
        self._details = ""

    # -- the call's end, as the handler sees it ---------------------------------------------------
    def call_ended(self) -> None:
        """The call is over (answered, cancelled, timed out): run the callbacks, once."""
        with self._lock:
            if self._done.is_set():
                return
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # a callback's failure must not keep the others from running
                log.exception("a callback for the end of a call failed")

    def is_active(self) -> bool:
        return not self._done.is_set()

    def add_callback(self, callback: Callable[[], None]) -> bool:
        with self._lock:
            if self._done.is_set():
                return False
            self._callbacks.append(callback)
            return True

    def time_remaining(self) -> float | None:
        return self._call.time_remaining()

    # -- what the call carries --------------------------------------------------------------------
    def invocation_metadata(self) -> Any:
        return self._call.invocation_metadata()

    def peer(self) -> str:
        return self._call.peer()

    def peer_identities(self) -> Any:
        return self._call.peer_identities()

    def peer_identity_key(self) -> Any:
        return self._call.peer_identity_key()

    def auth_context(self) -> Any:
        return self._call.auth_context()

    # -- how it ends ------------------------------------------------------------------------------
    def send_initial_metadata(self, metadata: Any) -> None:
        asyncio.run_coroutine_threadsafe(self._call.send_initial_metadata(metadata), self._loop).result()

    def set_trailing_metadata(self, metadata: Any) -> None:
        self._call.set_trailing_metadata(metadata)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code
        self._call.set_code(code)

    def set_details(self, details: str) -> None:
        self._details = details
        self._call.set_details(details)

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details
        raise _Aborted(code, details)

    def abort_with_status(self, status: Any) -> None:
        self.abort(status.code, status.details)


def is_coroutine_handler(handler: grpc.RpcMethodHandler) -> bool:
    behaviour = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    return inspect.iscoroutinefunction(behaviour) or inspect.isasyncgenfunction(behaviour)


class SyncHandlersAsCoroutines(grpc.aio.ServerInterceptor):
    """The first interceptor of an asyncio server (outermost): every synchronous handler, wrapped
    by the synchronous interceptors after it, becomes a coroutine that runs it in `pool`."""

    def __init__(self, pool: Executor) -> None:
        self._pool = pool

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or is_coroutine_handler(handler):
            return handler
        return as_coroutines(handler, self._pool)


def as_coroutines(handler: grpc.RpcMethodHandler, pool: Executor) -> grpc.RpcMethodHandler:
    deserialize, serialize = handler.request_deserializer, handler.response_serializer
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            _unary_answer(handler.unary_unary, pool, streamed=False), deserialize, serialize
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            _unary_answer(handler.stream_unary, pool, streamed=True), deserialize, serialize
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            _streamed_answers(handler.unary_stream, pool, streamed=False), deserialize, serialize
        )
    assert handler.stream_stream is not None, "a method handler has exactly one behaviour"
    return grpc.stream_stream_rpc_method_handler(
        _streamed_answers(handler.stream_stream, pool, streamed=True), deserialize, serialize
    )


class _Requests:
    """A client's request stream, read from the handler's thread (each read waits on the loop)."""

    def __init__(self, requests: AsyncIterator[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._requests = aiter(requests)
        self._loop = loop

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        future = asyncio.run_coroutine_threadsafe(_next_or_end(self._requests), self._loop)
        found = future.result()
        if found is _END:
            raise StopIteration
        return found


async def _next_or_end(requests: AsyncIterator[Any]) -> Any:
    try:
        return await anext(requests)
    except StopAsyncIteration:
        return _END


def _start(
    request: Any, call: grpc.aio.ServicerContext, streamed: bool
) -> tuple[ThreadContext, contextvars.Context, Any, asyncio.AbstractEventLoop]:
    loop = asyncio.get_running_loop()
    context = ThreadContext(call, loop)
    call.add_done_callback(lambda _call: context.call_ended())  # type: ignore[arg-type]
    argument = _Requests(request, loop) if streamed else request
    # A context of its own for the whole call, started empty of any earlier call's values.
    return context, contextvars.Context(), argument, loop


def _next_or_end_of(answers: Iterator[Any]) -> Any:
    return next(answers, _END)


def _unary_answer(behaviour: Callable[..., Any], pool: Executor, *, streamed: bool) -> Any:
    async def run(request: Any, call: grpc.aio.ServicerContext) -> Any:
        context, values, argument, loop = _start(request, call, streamed)
        try:
            return await loop.run_in_executor(pool, values.run, behaviour, argument, context)
        except _Aborted as aborted:
            await call.abort(aborted.code, aborted.details)
        finally:
            context.call_ended()

    return run


def _streamed_answers(behaviour: Callable[..., Any], pool: Executor, *, streamed: bool) -> Any:
    async def run(request: Any, call: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        context, values, argument, loop = _start(request, call, streamed)
        answers: Iterator[Any] | None = None
        step: asyncio.Future[Any] | None = None
        try:
            started: Iterator[Any] = await loop.run_in_executor(
                pool, values.run, lambda: iter(behaviour(argument, context))
            )
            answers = started
            while True:
                step = loop.run_in_executor(pool, values.run, _next_or_end_of, started)
                answer = await step
                step = None
                if answer is _END:
                    break
                yield answer
        except _Aborted as aborted:
            await call.abort(aborted.code, aborted.details)
        finally:
            # The client went away, or the answers ended: a handler still waiting sees
            # is_active() False and returns; its generator is closed once its step is done
            # (a generator cannot be closed while it runs).
            context.call_ended()
            close = getattr(answers, "close", None)
            if close is not None:
                if step is None:
                    pool.submit(values.run, close)
                else:
                    step.add_done_callback(lambda _step: pool.submit(values.run, close))

    return run
