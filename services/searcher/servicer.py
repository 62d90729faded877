"""The SearcherService gRPC edge: convert messages, call the session table, map domain errors to
status codes with their messages."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.searcher.v1 import searcher_pb2_grpc
from services.common.logging import get_logger
from services.searcher import convert
from services.searcher.domain.errors import SearcherError
from services.searcher.domain.preview import preview
from services.searcher.domain.registry import MethodRegistry
from services.searcher.domain.sessions import SessionManager

log = get_logger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SearcherService"].full_name

_CODES = {
    "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "FAILED_PRECONDITION": grpc.StatusCode.FAILED_PRECONDITION,
}

F = TypeVar("F", bound=Callable[..., Any])


def _rpc(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(self, request, context)
        except SearcherError as exc:
            code = _CODES.get(exc.kind, grpc.StatusCode.INTERNAL)
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                log.info("request refused", method=fn.__name__, error=str(exc))
            context.abort(code, str(exc))

    return wrapper  # type: ignore[return-value]


class SearcherServicer(searcher_pb2_grpc.SearcherServiceServicer):
    def __init__(self, sessions: SessionManager, registry: MethodRegistry) -> None:
        self._sessions = sessions
        self._registry = registry

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
        answer = self._sessions.handle(request.session_id, request.after_seq, event)
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
        return convert.preview_to_proto(preview(convert.spec_from_proto(request.spec), self._registry))
