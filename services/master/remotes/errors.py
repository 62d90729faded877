"""Mapping of gRPC failures from other services to domain errors."""

from __future__ import annotations

import grpc

from services.master.domain.kernel.errors import (
    DomainError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)

_TRANSIENT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNKNOWN,
}


def translate(service: str, address: str, error: grpc.RpcError) -> DomainError:
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgument(details)
    if code == grpc.StatusCode.NOT_FOUND:
        return NotFound(details)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return FailedPrecondition(details)
    if code in _TRANSIENT:
        return Unavailable(f"{service} service at {address} is unavailable: {details}")
    return DomainError(f"{service} service at {address} failed ({code.name}): {details}")
