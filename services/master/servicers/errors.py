"""Turning domain errors into gRPC statuses, in one place."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from services.common.logging import get_logger
from services.master.domain.errors import DomainError, InvalidArgument
from services.master.domain.states import InvalidTransition
from services.master.servicers.request_checks import nul_field

log = get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

CODES = {
    "INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT,
    "NOT_FOUND": grpc.StatusCode.NOT_FOUND,
    "ALREADY_EXISTS": grpc.StatusCode.ALREADY_EXISTS,
    "FAILED_PRECONDITION": grpc.StatusCode.FAILED_PRECONDITION,
    "UNAUTHENTICATED": grpc.StatusCode.UNAUTHENTICATED,
    "PERMISSION_DENIED": grpc.StatusCode.PERMISSION_DENIED,
    "UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "INTERNAL": grpc.StatusCode.INTERNAL,
}


def _abort(context: grpc.ServicerContext, exc: Exception) -> None:
    if isinstance(exc, InvalidTransition):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc))
    assert isinstance(exc, DomainError)
    context.abort(CODES.get(exc.kind, grpc.StatusCode.INTERNAL), str(exc))


def _check_request(request: Any) -> None:
    field = nul_field(request)
    if field is not None:
        raise InvalidArgument(f"{field}: must not contain NUL characters")


def rpc(fn: F) -> F:
    """Unary handler: domain errors become the matching status with their message."""

    @functools.wraps(fn)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            _check_request(request)
            return fn(self, request, context)
        except (DomainError, InvalidTransition) as exc:
            _abort(context, exc)

    return wrapper  # type: ignore[return-value]


def stream_rpc(fn: F) -> F:
    """Server-streaming handler: the same mapping, for errors raised while streaming."""

    @functools.wraps(fn)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            _check_request(request)
            yield from fn(self, request, context)
        except (DomainError, InvalidTransition) as exc:
            _abort(context, exc)

    return wrapper  # type: ignore[return-value]
