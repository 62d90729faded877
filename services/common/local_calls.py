"""Calling a process's own gRPC handlers in the calling thread: the same servicers, behind the same
interceptors, with the same statuses — without the loopback hop.

The master's REST gateway answers HTTP requests by calling the public gRPC API. Through the real
server, every call pays for serializing the request, a socket round trip, a hand-off to the
server's thread pool, serializing the reply and parsing it again; for a list of a hundred
experiments that was a fifth of the master's CPU per request. Here the handler table is filled by
the same `register` function the server uses, each call resolves its handler through the server's
interceptors (authentication included), and the handler runs in the caller's thread, in a fresh
contextvars context so nothing a call sets (the principal) leaks into the next one.

What a caller sees matches a channel's behaviour: a failed call raises `LocalCallError`, a
`grpc.RpcError` and `grpc.Call` with `code()` and `details()`; an exception that escapes a handler
is UNKNOWN, as the real server reports it.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import grpc
from google.protobuf.message import Message

from services.common.logging import get_logger

log = get_logger(__name__)

Metadata = Sequence[tuple[str, str]]

# The peer of a call the REST gateway makes for an HTTP client: this, then the client's address
# ("http:10.0.0.5"), so that what a servicer (or the audit trail) takes for the caller's address is
# the HTTP client's, not the process's own.
HTTP_PEER_PREFIX = "http:"


class LocalCallError(grpc.RpcError, grpc.Call):
    """A failed local call, shaped like the error a channel raises."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    # The rest of grpc.Call: a finished call has no metadata and nothing left to cancel.
    def initial_metadata(self) -> tuple[()]:
        return ()

    def trailing_metadata(self) -> tuple[()]:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float:
        return 0.0

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False


class RenderedJson:
    """A stream message already written as the JSON the REST gateway would print for it (compact,
    grpc-gateway's shape): what a handler may yield instead of the message to a local caller that
    asked for it (`LocalCalls.stream(..., rendered_json=True)`; see `accepts_rendered_json`), so a
    hot read skips building protobuf only for the gateway to take it apart again. A handler yields
    these only when the call's context accepts them: over a real channel it yields messages."""

    __slots__ = ("json",)

    def __init__(self, json: bytes) -> None:
        self.json = json


def accepts_rendered_json(context: grpc.ServicerContext) -> bool:
    """Whether the caller behind `context` takes RenderedJson messages (only local REST calls do)."""
    return getattr(context, "rendered_json", False) is True


class _CallDetails(grpc.HandlerCallDetails):
    def __init__(self, method: str, metadata: tuple[tuple[str, str | bytes], ...]) -> None:
        self.method = method
        self.invocation_metadata = metadata


class _Context(grpc.ServicerContext):
    """The servicer's view of a local call."""

    def __init__(
        self, metadata: tuple[tuple[str, str | bytes], ...], peer: str, timeout_s: float | None
    ) -> None:
        self._metadata = metadata
        self._peer = peer
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._cancelled = threading.Event()
        self._callbacks: list[Callable[[], None]] = []
        self.status_code: grpc.StatusCode | None = None
        self.status_details = ""
        # Set by LocalCalls.stream for a caller that takes RenderedJson (accepts_rendered_json).
        self.rendered_json = False

    # --- what servicers read ---
    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def peer_identities(self) -> None:
        return None

    def peer_identity_key(self) -> None:
        return None

    def auth_context(self) -> Mapping[str, bytes]:
        return {}

    def is_active(self) -> bool:
        return not self._cancelled.is_set() and (self._deadline is None or time.monotonic() < self._deadline)

    def time_remaining(self) -> float:
        return math.inf if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    # --- how servicers end a call ---
    def abort(self, code: grpc.StatusCode, details: str) -> Any:
        raise LocalCallError(code, details)

    def abort_with_status(self, status: Any) -> Any:
        raise LocalCallError(status.code, status.details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.status_code = code

    def set_details(self, details: str) -> None:
        self.status_details = details

    # What the call's status is so far, as the real server's context tells it (an interceptor
    # that records how calls end reads it).
    def code(self) -> grpc.StatusCode | None:
        return self.status_code

    def details(self) -> str:
        return self.status_details

    def cancel(self) -> bool:
        self._cancelled.set()
        return True

    def add_callback(self, callback: Callable[[], None]) -> bool:
        self._callbacks.append(callback)
        return True

    def send_initial_metadata(self, initial_metadata: Any) -> None:
        pass  # nothing travels: the caller reads the reply object itself

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        pass

    def finish(self) -> None:
        for callback in self._callbacks:
            try:
                callback()
            except Exception:
                log.exception("local call callback failed")


class LocalStream:
    """A server stream run in the consuming thread: each message is the handler's next one.

    cancel() may come from any thread (a client that went away): the handler sees is_active()
    turn False. close() ends the handler's generator and must come from the consuming thread, when
    it no longer iterates."""

    def __init__(
        self, method: str, messages: Iterator[Message], context: _Context, run: contextvars.Context
    ) -> None:
        self._method = method
        self._messages = messages
        self._context = context
        self._run = run
        self._done = False

    def __iter__(self) -> LocalStream:
        return self

    def __next__(self) -> Message:
        if self._done:
            raise StopIteration
        try:
            # Every step in the same context: the principal the interceptor set stays visible.
            return self._run.run(next, self._messages)
        except StopIteration:
            self._end()
            if self._context.status_code not in (None, grpc.StatusCode.OK):
                raise LocalCallError(self._context.status_code, self._context.status_details) from None
            raise
        except LocalCallError:
            self._end()
            raise
        except Exception as exc:
            self._end()
            log.exception("local stream failed in its handler", method=self._method)
            raise LocalCallError(grpc.StatusCode.UNKNOWN, f"Exception iterating responses: {exc}") from exc

    def cancel(self) -> None:
        self._context.cancel()

    def close(self) -> None:
        self._context.cancel()
        if not self._done:
            self._end()

    def _end(self) -> None:
        self._done = True
        close = getattr(self._messages, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                self._run.run(close)
        self._context.finish()


class HandlerTable:
    """Collects the method handlers a generated `add_*Servicer_to_server` registers; it stands where
    the server would, so the very same registration code fills it."""

    def __init__(self) -> None:
        self._generic: list[grpc.GenericRpcHandler] = []
        self._registered: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(handlers)

    def add_registered_method_handlers(
        self, service_name: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        for method, handler in handlers.items():
            self._registered[f"/{service_name}/{method}"] = handler

    def lookup(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._registered.get(details.method)
        if handler is not None:
            return handler
        for generic in self._generic:
            handler = generic.service(details)
            if handler is not None:
                return handler
        return None


class LocalCalls:
    """Unary calls into `register`'s servicers through `interceptors`, in the calling thread."""

    def __init__(
        self,
        register: Callable[[Any], Sequence[str]],
        interceptors: Sequence[grpc.ServerInterceptor] = (),
        peer: str = "local",
    ) -> None:
        self._table = HandlerTable()
        register(self._table)
        self._interceptors = list(interceptors)
        self._peer = peer

    def _resolve(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        # The server's order: the first interceptor sees the call first and wraps all the others.
        def through(index: int) -> Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None]:
            if index == len(self._interceptors):
                return self._table.lookup
            interceptor = self._interceptors[index]
            return lambda d: interceptor.intercept_service(through(index + 1), d)

        return through(0)(details)

    def _start(
        self, method: str, metadata: Metadata, timeout_s: float | None, peer: str | None, streaming: bool
    ) -> tuple[Callable[[Any, grpc.ServicerContext], Any], _Context]:
        """The handler's behaviour for `method`, behind the interceptors, and the call's context."""
        pairs: tuple[tuple[str, str | bytes], ...] = tuple((str(k), str(v)) for k, v in metadata)
        handler = self._resolve(_CallDetails(method, pairs))
        if handler is None:
            raise LocalCallError(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        behaviour = handler.unary_stream if streaming else handler.unary_unary
        if behaviour is None:
            kind = "server stream" if streaming else "unary call"
            raise LocalCallError(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not a {kind}")
        return behaviour, _Context(pairs, peer or self._peer, timeout_s)

    def unary(
        self,
        method: str,
        request: Message,
        metadata: Metadata = (),
        timeout_s: float | None = None,
        peer: str | None = None,
    ) -> Message:
        """The reply of `method` (its full path) to `request`; LocalCallError when the call fails."""
        behaviour, context = self._start(method, metadata, timeout_s, peer, streaming=False)
        try:
            reply = contextvars.copy_context().run(behaviour, request, context)
        except LocalCallError:
            raise
        except Exception as exc:
            raise _handler_failed(method, exc) from exc
        finally:
            context.finish()
        if context.status_code not in (None, grpc.StatusCode.OK):
            raise LocalCallError(context.status_code, context.status_details)
        if reply is None:
            # What the server reports when a handler returns nothing without setting a status.
            raise LocalCallError(grpc.StatusCode.INTERNAL, "Failed to serialize response!")
        return cast(Message, reply)

    def stream(
        self,
        method: str,
        request: Message,
        metadata: Metadata = (),
        timeout_s: float | None = None,
        peer: str | None = None,
        rendered_json: bool = False,
    ) -> LocalStream:
        """The messages of server-streaming `method`; iterating raises LocalCallError on failure.
        With `rendered_json`, handlers that can may yield RenderedJson instead of messages."""
        behaviour, context = self._start(method, metadata, timeout_s, peer, streaming=True)
        context.rendered_json = rendered_json
        run = contextvars.copy_context()
        # A generator handler runs nothing until the first next(): checks and errors come then.
        try:
            messages = run.run(behaviour, request, context)
        except LocalCallError:
            context.finish()
            raise
        except Exception as exc:
            context.finish()
            raise _handler_failed(method, exc) from exc
        return LocalStream(method, iter(messages), context, run)


def _handler_failed(method: str, exc: Exception) -> LocalCallError:
    """The real server's answer to a handler that raised: UNKNOWN, and the error in its log."""
    log.exception("local call failed in its handler", method=method)
    return LocalCallError(grpc.StatusCode.UNKNOWN, f"Exception calling application: {exc}")
