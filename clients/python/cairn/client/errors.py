"""Errors a user can act on, each readable as one line, and the mapping from gRPC status codes."""

from __future__ import annotations

import grpc

# Where a connection failure shows up in grpc-core's own status details. A master that answers
# UNAVAILABLE itself (a dependency is down) says something else, and gets its words shown.
_TRANSPORT_FAILURE_HINTS = (
    "failed to connect",
    "connection refused",
    "connection reset",
    "connections to all backends failing",
    "dns resolution failed",
    "name resolution",
    "socket closed",
    "broken pipe",
    "goaway",
    "end of tcp stream",
    "connect failed",
    "keepalive",
    "deadline exceeded while connecting",
)


class CairnError(Exception):
    """An error whose message tells the user what went wrong, in one line."""

    exit_code = 1


class MasterError(CairnError):
    """A call to the master failed; `code` is the gRPC status (None when the call had none)."""

    def __init__(self, message: str, code: grpc.StatusCode | None) -> None:
        super().__init__(message)
        self.code = code


def one_line(text: str) -> str:
    """Server messages may span lines (validation lists); a terminal error should not."""
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())


def looks_like_transport_failure(details: str) -> bool:
    lowered = details.lower()
    return not lowered or any(hint in lowered for hint in _TRANSPORT_FAILURE_HINTS)


def rpc_error_message(exc: grpc.RpcError, master: str) -> str:
    """The one line to show for a failed call to the master at `master` (host:port)."""
    code_fn = getattr(exc, "code", None)
    details_fn = getattr(exc, "details", None)
    code: grpc.StatusCode | None = code_fn() if callable(code_fn) else None
    details = one_line(str(details_fn() or "")) if callable(details_fn) else ""
    code_name = code.name if code is not None else "UNKNOWN"

    if code == grpc.StatusCode.UNAVAILABLE:
        if looks_like_transport_failure(details):
            return f"cannot reach the master at {master} (is the cluster up? `cairn cluster up`)"
        return f"the master at {master} is unavailable: {details}"
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return "not logged in or session expired: run `cairn user login`"
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return f"permission denied: {details}" if details else "permission denied"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"the master at {master} did not answer in time"
    if code == grpc.StatusCode.UNIMPLEMENTED:
        suffix = f" ({details})" if details else ""
        return f"the master at {master} does not support this call{suffix}; is it an older version?"
    if code == grpc.StatusCode.CANCELLED:
        return "the call was cancelled"
    if details and code in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    ):
        return details
    if details:
        return f"the master failed ({code_name}): {details}"
    return f"the master failed ({code_name})"


def from_rpc_error(exc: grpc.RpcError, master: str) -> MasterError:
    code_fn = getattr(exc, "code", None)
    code = code_fn() if callable(code_fn) else None
    return MasterError(rpc_error_message(exc, master), code)


def rpc_status_code(exc: grpc.RpcError) -> grpc.StatusCode | None:
    code_fn = getattr(exc, "code", None)
    return code_fn() if callable(code_fn) else None
