"""The SearcherService gRPC edge: convert messages, call the session table, answer the kit's errors
with their status codes and messages.

Any other exception is a bug in the search: it is left to gRPC, which logs it and answers UNKNOWN;
the master takes that as a passing failure and retries (the session fell back to its last
snapshot, so a retry meets the same state).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.searcher.v1 import searcher_pb2_grpc
from cairn.searcher_plugin import convert
from cairn.searcher_plugin.errors import InvalidEvent, InvalidRequest, SearcherError
from cairn.searcher_plugin.method import SearchFactory
from cairn.searcher_plugin.sessions import SessionTable

log = logging.getLogger(__name__)

# HandleEvents takes at most this many events (the contract's bound).
MAX_EVENTS_PER_CALL = 10_000

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SearcherService"].full_name

F = TypeVar("F", bound=Callable[..., Any])


def status_of(exc: SearcherError) -> grpc.StatusCode:
    return getattr(grpc.StatusCode, exc.kind, grpc.StatusCode.INTERNAL)


def _rpc(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(self, request, context)
        except SearcherError as exc:
            code = status_of(exc)
            # Refusals are the caller's to act on; NOT_FOUND and FAILED_PRECONDITION are the normal
            # way to ask the master for a restore.
            level = logging.INFO if code == grpc.StatusCode.INVALID_ARGUMENT else logging.DEBUG
            log.log(level, "request refused method=%s code=%s error=%s", fn.__name__, code.name, exc)
            context.abort(code, str(exc) or type(exc).__name__)

    return wrapper  # type: ignore[return-value]


class SearcherServicer(searcher_pb2_grpc.SearcherServiceServicer):
    def __init__(self, factory: SearchFactory, sessions: SessionTable | None = None) -> None:
        self._factory = factory
        self._sessions = sessions if sessions is not None else SessionTable(factory)

    @_rpc
    def StartSession(
        self, request: pb.StartSessionRequest, context: grpc.ServicerContext
    ) -> pb.SearcherResponse:
        answer = self._sessions.start(request.session_id, convert.spec_from_proto(request.spec))
        return convert.answer_to_proto(answer)

    @_rpc
    def HandleEvent(
        self, request: pb.HandleEventRequest, context: grpc.ServicerContext
    ) -> pb.SearcherResponse:
        event = convert.event_from_proto(request.event)
        answer = self._sessions.handle(
            request.session_id, request.after_seq, event, state_needed=not request.state_not_needed
        )
        return convert.answer_to_proto(answer)

    @_rpc
    def HandleEvents(
        self, request: pb.HandleEventsRequest, context: grpc.ServicerContext
    ) -> pb.SearcherResponse:
        if len(request.events) > MAX_EVENTS_PER_CALL:
            raise InvalidRequest(
                f"events: at most {MAX_EVENTS_PER_CALL} events in one call, got {len(request.events)}"
            )
        events = []
        for index, message in enumerate(request.events):
            try:
                events.append(convert.event_from_proto(message))
            except InvalidEvent as exc:
                raise InvalidEvent(f"events[{index}]: {exc}") from None
        answer = self._sessions.handle_many(
            request.session_id, request.after_seq, events, state_needed=not request.state_not_needed
        )
        return convert.answer_to_proto(answer)

    @_rpc
    def RestoreSession(
        self, request: pb.RestoreSessionRequest, context: grpc.ServicerContext
    ) -> pb.RestoreSessionResponse:
        progress = self._sessions.restore(
            request.session_id,
            convert.spec_from_proto(request.spec),
            convert.snapshot_from_proto(request.snapshot),
        )
        return pb.RestoreSessionResponse(progress=progress)

    @_rpc
    def CloseSession(
        self, request: pb.CloseSessionRequest, context: grpc.ServicerContext
    ) -> pb.CloseSessionResponse:
        self._sessions.close(request.session_id)
        return pb.CloseSessionResponse()

    @_rpc
    def PreviewSearch(
        self, request: pb.PreviewSearchRequest, context: grpc.ServicerContext
    ) -> pb.PreviewSearchResponse:
        return convert.preview_to_proto(self._factory.preview(convert.spec_from_proto(request.spec)))
