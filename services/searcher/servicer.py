"""The SearcherService gRPC edge: convert messages, call the session table, map domain errors to
status codes with their messages."""

from __future__ import annotations

import grpc

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.searcher.v1 import searcher_pb2_grpc
from services.common.logging import get_logger
from services.common.status import handlers, status_of
from services.searcher import convert
from services.searcher.domain.errors import SearcherError
from services.searcher.domain.preview import preview
from services.searcher.domain.registry import MethodRegistry
from services.searcher.domain.sessions import SessionManager

log = get_logger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SearcherService"].full_name


def _log_refusal(method: str, exc: BaseException) -> None:
    if status_of(exc) == grpc.StatusCode.INVALID_ARGUMENT:
        log.info("request refused", method=method, error=str(exc))


_rpc, _ = handlers((SearcherError,), on_error=_log_refusal)


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
