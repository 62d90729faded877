"""The SearcherService edge: convert messages, call the session table, answer errors with their
status codes and messages."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from cairn.searcher.v1 import searcher_pb2 as pb
from cairn.searcher.v1 import searcher_pb2_grpc

from . import convert
from .errors import SearcherError
from .preview import preview
from .sessions import SessionTable

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SearcherService"].full_name

F = TypeVar("F", bound=Callable[..., Any])


def _rpc(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(self, request, context)
        except SearcherError as exc:
            code, message = grpc.StatusCode[exc.code], str(exc)
            log.info("request refused method=%s code=%s error=%s", fn.__name__, exc.code, message)
        except Exception as exc:
            log.exception("request failed method=%s", fn.__name__)
            code, message = grpc.StatusCode.INTERNAL, f"internal error: {exc}"
        context.abort(code, message)

    return wrapper  # type: ignore[return-value]


class TPESearcherServicer(searcher_pb2_grpc.SearcherServiceServicer):
    def __init__(self, sessions: SessionTable) -> None:
        self._sessions = sessions

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
        return convert.preview_to_proto(preview(convert.spec_from_proto(request.spec)))
