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


def certificate_problem(details: str) -> str | None:
    """A sentence for a connection failure that is a TLS problem; None for any other failure."""
    text = details.upper()
    if "CERTIFICATE_VERIFY_FAILED" in text or "CERTIFICATE VERIFY FAILED" in text:
        return (
            "its certificate could not be verified (CERTIFICATE_VERIFY_FAILED); pass the CA that "
            "signed it with --master-cert FILE or $CAIRN_MASTER_CERT"
        )
    if "SSL" in text and "HANDSHAKE" in text:
        return (
            "the TLS handshake failed; check that the master serves TLS on this port and that "
            "--master-cert / $CAIRN_MASTER_CERT names its CA"
        )
    return None


def rpc_error_message(exc: grpc.RpcError, master: str) -> str:
    """The one line to show for a failed call to the master at `master` (host:port)."""
    code_fn = getattr(exc, "code", None)
    details_fn = getattr(exc, "details", None)
    code: grpc.StatusCode | None = code_fn() if callable(code_fn) else None
    details = one_line(str(details_fn() or "")) if callable(details_fn) else ""
    code_name = code.name if code is not None else "UNKNOWN"

    if code == grpc.StatusCode.UNAVAILABLE:
        problem = certificate_problem(details)
        if problem:
            return f"cannot connect to the master at {master} over TLS: {problem}"
        if "socket closed" in details.lower():
            # What a plaintext client sees of a master that serves TLS (or of one going down).
            return (
                f"cannot reach the master at {master}: it closed the connection (is the cluster "
                "up? if the master serves TLS, pass its CA with --master-cert FILE or $CAIRN_MASTER_CERT)"
            )
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
