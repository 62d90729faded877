"""Errors in the shapes REST clients parse: gRPC codes to HTTP statuses, unary error bodies and the
last line of a failed stream.

The unary body serves both kinds of clients at once: Determined's (`body["error"]["error"]`,
harness/determined/common/api/errors.py) and grpc-gateway's (`code`, `message`, `details`).
A stream that fails after its first message ends with grpc-gateway v1's StreamError, in the
camelCase keys Determined's generated client reads (`grpcCode`, `httpCode`, `httpStatus`, ...).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import grpc

# grpc-gateway's HTTPStatusFromCode; CANCELLED is 499 ("client closed request") as in v2.
_HTTP_STATUS: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
}

# Every status a gRPC error can become, for the OpenAPI document.
ERROR_HTTP_STATUSES = sorted({s for c, s in _HTTP_STATUS.items() if c != grpc.StatusCode.OK})

# The names Go's codes.Code.String() prints, which Determined's error body carries as `reason`.
_GO_NAMES: dict[grpc.StatusCode, str] = {
    grpc.StatusCode.OK: "OK",
    grpc.StatusCode.CANCELLED: "Canceled",
    grpc.StatusCode.UNKNOWN: "Unknown",
    grpc.StatusCode.INVALID_ARGUMENT: "InvalidArgument",
    grpc.StatusCode.DEADLINE_EXCEEDED: "DeadlineExceeded",
    grpc.StatusCode.NOT_FOUND: "NotFound",
    grpc.StatusCode.ALREADY_EXISTS: "AlreadyExists",
    grpc.StatusCode.PERMISSION_DENIED: "PermissionDenied",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "ResourceExhausted",
    grpc.StatusCode.FAILED_PRECONDITION: "FailedPrecondition",
    grpc.StatusCode.ABORTED: "Aborted",
    grpc.StatusCode.OUT_OF_RANGE: "OutOfRange",
    grpc.StatusCode.UNIMPLEMENTED: "Unimplemented",
    grpc.StatusCode.INTERNAL: "Internal",
    grpc.StatusCode.UNAVAILABLE: "Unavailable",
    grpc.StatusCode.DATA_LOSS: "DataLoss",
    grpc.StatusCode.UNAUTHENTICATED: "Unauthenticated",
}


def http_status(code: grpc.StatusCode) -> int:
    return _HTTP_STATUS.get(code, 500)


def status_text(status: int) -> str:
    if status == 499:
        return "Client Closed Request"  # nginx's name; not in the IANA registry
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def grpc_code_number(code: grpc.StatusCode) -> int:
    return int(code.value[0])


class GatewayError(Exception):
    """An error answered by the gateway itself, in the same shape as a gRPC error."""

    def __init__(self, code: grpc.StatusCode, message: str, http_status_override: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = http_status_override or http_status(code)


def bad_request(message: str) -> GatewayError:
    return GatewayError(grpc.StatusCode.INVALID_ARGUMENT, message)


def error_body(code: grpc.StatusCode, message: str) -> dict[str, Any]:
    number = grpc_code_number(code)
    return {
        "error": {"code": number, "reason": _GO_NAMES.get(code, "Unknown"), "error": message},
        "code": number,
        "message": message,
        "details": [],
    }


def stream_error_line(code: grpc.StatusCode, message: str) -> dict[str, Any]:
    status = http_status(code)
    return {
        "error": {
            "grpcCode": grpc_code_number(code),
            "httpCode": status,
            "message": message,
            "httpStatus": status_text(status),
            "details": [],
        }
    }


def rpc_error_parts(error: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    """Code and message of a failed call (a grpc.Call, as every RpcError from a channel is)."""
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = error.details() if isinstance(error, grpc.Call) else str(error)
    return code or grpc.StatusCode.UNKNOWN, details or ""
