"""The audit trail's edge: one server interceptor, outside every other, that records each call of a
method the table classifies as a change (audit_methods.py), so no servicer has to remember to.
A new RPC is recorded (or not) by what its proto rule says, with nothing to write here.

For each such call it records who (the principal the authentication interceptor established, or,
for a call without credentials, the user a login named), what (the method, the objects its request
names), from where, when, and how it ended: OK, or the status code a refused or failed call got,
a refusal by the authentication interceptor itself included. The record is handed to the
recorder's queue (domain/audit/recorder.py) and stored in the background: a call waits for no
audit write.

Where from. A gRPC caller is its connection's peer. A REST call reaches the servicers in the
master's own process (services/common/local_calls.py) with the HTTP client's address as its peer;
from a worker process of the HTTP port it arrives over loopback, so its client's address comes in
the call's `x-forwarded-for` (the last hop, the one the worker appended), believed only when the
call also carries the worker's per-boot gateway key.

Calls that stream their answers are recorded when the first answer goes out (an agent's stream:
its Welcome, so an enrolment is recorded when it happens, not when the agent leaves days later),
or when they end before one does.
"""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import inspect
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, cast

import grpc

from services.common.interceptors import clear_principal, current_principal
from services.common.local_calls import HTTP_PEER_PREFIX
from services.common.logging import get_logger
from services.common.metadata import GATEWAY_KEY_KEY, Metadata, metadata_value
from services.common.principal import Principal
from services.master.domain.audit import events
from services.master.domain.audit.events import AuditRecord, bounded
from services.master.domain.identity.login_limiter import client_address
from services.master.servicers.audit_methods import MethodEntry, method_table

log = get_logger(__name__)

FORWARDED_FOR_KEY = "x-forwarded-for"

Record = Callable[[AuditRecord], None]


def _who(principal: Principal | None, request: Any, reply: Any) -> tuple[str, int | None, str, str]:
    """(actor, user id, username, allocation id) of a call."""
    if principal is None:
        # No credentials established: a login (its answer names the user it logged in), or a call
        # refused before it ran; a login's name is kept as given, failed ones included.
        user = getattr(reply, "user", None)
        if user is not None and getattr(user, "id", None):
            return events.USER, int(user.id), bounded(str(user.username), events.MAX_USERNAME), ""
        given = getattr(request, "username", "") if request is not None else ""
        return events.ANONYMOUS, None, bounded(str(given), events.MAX_USERNAME), ""
    allocation = bounded(principal.allocation_id or "", events.MAX_ALLOCATION_ID)
    if principal.user_id is not None:
        return events.USER, principal.user_id, principal.username, allocation
    if principal.allocation_id:
        return events.ALLOCATION, None, "", allocation
    # An agent by its own credential (agent_id), on the cluster token, or enrolling.
    actor = (
        events.AGENT if principal.username == "agent" or principal.agent_id is not None else events.CLUSTER
    )
    return actor, None, principal.username, ""


def _status(context: grpc.ServicerContext, exc: BaseException | None) -> tuple[str, str]:
    """(outcome, error) of a call that returned (`exc` None) or raised `exc`."""
    if isinstance(exc, grpc.RpcError) and isinstance(exc, grpc.Call):
        code, details = exc.code(), exc.details()
    else:
        # The real server's context holds what abort() or set_code() left; a handler that raised
        # anything else is answered UNKNOWN.
        read_code = getattr(context, "code", None)
        code = read_code() if callable(read_code) else None
        read_details = getattr(context, "details", None)
        details = read_details() if callable(read_details) else ""
        went_away = isinstance(exc, (GeneratorExit, asyncio.CancelledError))
        if code is None and exc is not None and not went_away:
            code, details = grpc.StatusCode.UNKNOWN, details or f"{type(exc).__name__}: {exc}"
    if code is None or code == grpc.StatusCode.OK:
        return events.OK, ""
    if isinstance(details, bytes):
        details = details.decode("utf-8", "replace")
    return code.name, bounded(str(details or ""), events.MAX_ERROR)


class _Call:
    """One audited call: what is known of it, and its record once it is over."""

    __slots__ = ("at", "done", "entry", "in_task", "interceptor", "metadata", "request", "run", "started")

    def __init__(
        self, interceptor: AuditInterceptor, entry: MethodEntry, metadata: Metadata, *, in_task: bool = False
    ) -> None:
        self.interceptor = interceptor
        self.entry = entry
        self.metadata = metadata
        self.at = time.time()
        self.started = time.perf_counter()
        self.request: Any = None
        self.done = False
        # The call runs in a context of its own, so that who called (set by the authentication
        # interceptor inside) can be read afterwards, and a thread's last call is never taken for it.
        # A coroutine handler's (`in_task`) is its task's: one per call on the asyncio server.
        self.in_task = in_task
        self.run = contextvars.copy_context()
        self.run.run(clear_principal)

    def principal(self) -> Principal | None:
        return current_principal() if self.in_task else self.run.run(current_principal)

    def finish(self, context: grpc.ServicerContext, reply: Any, exc: BaseException | None) -> None:
        if self.done:
            return
        self.done = True
        try:
            self.interceptor.record(self, context, reply, exc)
        except Exception:
            # The trail must never fail the call it records.
            log.exception("audit record failed", method=self.entry.name)


class AuditInterceptor(grpc.ServerInterceptor):
    """Must be the first interceptor (outermost): it sees refusals by the ones inside it."""

    def __init__(
        self, record: Record, gateway_key: str = "", table: Mapping[str, MethodEntry] | None = None
    ) -> None:
        self._record = record
        self._gateway_key = gateway_key
        self._table = table if table is not None else method_table()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        entry = self._table.get(handler_call_details.method)
        if entry is None or not entry.audited:
            return handler
        return self._wrap(handler, entry, handler_call_details.invocation_metadata or ())

    # ---- recording ----

    def origin(self, context: grpc.ServicerContext, metadata: Metadata) -> tuple[str, str]:
        """(address, transport) the call came from."""
        peer = context.peer() or ""
        if peer.startswith(HTTP_PEER_PREFIX):
            return peer[len(HTTP_PEER_PREFIX) :], "rest"
        if self._gateway_key:
            presented = metadata_value(metadata, GATEWAY_KEY_KEY)
            if presented and hmac.compare_digest(presented.encode(), self._gateway_key.encode()):
                chain = metadata_value(metadata, FORWARDED_FOR_KEY) or ""
                client = chain.rpartition(",")[2].strip()
                if client:
                    return client, "rest"
        return client_address(peer), "grpc"

    def record(
        self, call: _Call, context: grpc.ServicerContext, reply: Any, exc: BaseException | None
    ) -> None:
        outcome, error = _status(context, exc)
        actor, user_id, username, allocation_id = _who(call.principal(), call.request, reply)
        address, transport = self.origin(context, call.metadata)
        entry = call.entry
        self._record(
            AuditRecord(
                at=call.at,
                method=entry.name,
                outcome=outcome,
                actor=actor,
                user_id=user_id,
                username=username,
                allocation_id=allocation_id,
                targets=self._targets(entry, call.request, reply),
                error=error,
                address=bounded(address, events.MAX_ADDRESS),
                transport=transport,
                duration_ms=(time.perf_counter() - call.started) * 1000.0,
            )
        )

    @staticmethod
    def _targets(entry: MethodEntry, request: Any, reply: Any) -> tuple[tuple[str, str], ...]:
        named = entry.targets.of(request) if request is not None else ()
        return entry.created.of(reply, named) if reply is not None else named

    # ---- the four shapes of a handler ----

    def _wrap(self, handler: grpc.RpcMethodHandler, entry: MethodEntry, metadata: Metadata) -> Any:
        if handler.unary_unary:
            inner_uu = handler.unary_unary

            def unary_unary(request: Any, context: grpc.ServicerContext) -> Any:
                call = _Call(self, entry, metadata)
                call.request = request
                try:
                    reply = call.run.run(inner_uu, request, context)
                except BaseException as exc:
                    call.finish(context, None, exc)
                    raise
                call.finish(context, reply, None)
                return reply

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, handler.request_deserializer, handler.response_serializer
            )
        if handler.unary_stream:
            inner_us = handler.unary_stream

            def unary_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                call = _Call(self, entry, metadata)
                call.request = request
                yield from _answers(call, lambda: inner_us(request, context), context)

            return grpc.unary_stream_rpc_method_handler(
                unary_stream, handler.request_deserializer, handler.response_serializer
            )
        if handler.stream_unary:
            inner_su = handler.stream_unary

            def stream_unary(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
                call = _Call(self, entry, metadata)
                try:
                    reply = call.run.run(inner_su, _first_kept(call, requests), context)
                except BaseException as exc:
                    call.finish(context, None, exc)
                    raise
                call.finish(context, reply, None)
                return reply

            return grpc.stream_unary_rpc_method_handler(
                stream_unary, handler.request_deserializer, handler.response_serializer
            )
        inner_ss = handler.stream_stream
        assert inner_ss is not None, "a method handler has exactly one behaviour"
        if inspect.isasyncgenfunction(inner_ss):
            inner_async = cast(Callable[..., AsyncIterator[Any]], inner_ss)

            async def stream_stream_async(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
                call = _Call(self, entry, metadata, in_task=True)
                async for answer in _answers_in_task(
                    call, inner_async(_first_kept_in_task(call, requests), context), context
                ):
                    yield answer

            return grpc.stream_stream_rpc_method_handler(
                stream_stream_async, handler.request_deserializer, handler.response_serializer
            )

        def stream_stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            call = _Call(self, entry, metadata)
            yield from _answers(call, lambda: inner_ss(_first_kept(call, requests), context), context)

        return grpc.stream_stream_rpc_method_handler(
            stream_stream, handler.request_deserializer, handler.response_serializer
        )


def _first_kept(call: _Call, requests: Iterator[Any]) -> Iterator[Any]:
    """`requests`, the first of them kept as the call's request (what its targets are read from)."""
    messages = iter(requests)
    for message in messages:
        call.request = message
        yield message
        break
    yield from messages


def _answers(call: _Call, start: Callable[[], Any], context: grpc.ServicerContext) -> Iterator[Any]:
    """A streaming handler's answers, each produced in the call's context; recorded at the first
    answer or at the end, whichever comes first."""
    answers: Iterator[Any] | None = None
    try:
        answers = iter(call.run.run(start))
        while True:
            try:
                answer = call.run.run(next, answers)
            except StopIteration:
                break
            call.finish(context, None, None)
            yield answer
    except BaseException as exc:
        call.finish(context, None, exc)
        raise
    finally:
        close = getattr(answers, "close", None)
        if close is not None:
            call.run.run(close)
    call.finish(context, None, None)


async def _first_kept_in_task(call: _Call, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """_first_kept for a coroutine handler's request stream."""
    async for message in requests:
        if call.request is None:
            call.request = message
        yield message


async def _answers_in_task(call: _Call, answers: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
    """_answers for a coroutine handler (an agent's stream on the asyncio server): its answers are
    made in its own task, whose context is the call's."""
    try:
        async for answer in answers:
            call.finish(context, None, None)
            yield answer
    except BaseException as exc:
        call.finish(context, None, exc)
        raise
    call.finish(context, None, None)
