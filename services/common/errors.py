"""The errors every service's domain raises, by kind. Each kind names the gRPC status its service's
edge answers with (services/common/status.py holds that one mapping); the message goes to the caller
as is, so it names what is wrong (the field, the id, the state). Domain code raises these and knows
nothing of gRPC."""

from __future__ import annotations


class ServiceError(Exception):
    """Base class; `kind` names the status the edge answers with."""

    kind = "INTERNAL"


class InvalidArgument(ServiceError):
    kind = "INVALID_ARGUMENT"


class NotFound(ServiceError):
    kind = "NOT_FOUND"


class AlreadyExists(ServiceError):
    kind = "ALREADY_EXISTS"


class FailedPrecondition(ServiceError):
    kind = "FAILED_PRECONDITION"


class Unauthenticated(ServiceError):
    kind = "UNAUTHENTICATED"


class PermissionDenied(ServiceError):
    kind = "PERMISSION_DENIED"


class ResourceExhausted(ServiceError):
    """A limit on how much or how often a caller may ask was reached; the message says when to retry."""

    kind = "RESOURCE_EXHAUSTED"


class Aborted(ServiceError):
    """A sequencer check failed: what the call must follow (an earlier batch of a sequence) is not
    in place yet. The caller's request conflicts with the service's state, not the service with
    its duty: the caller may send it again once what it follows is there (gRPC's ABORTED, HTTP 409)."""

    kind = "ABORTED"


class Unavailable(ServiceError):
    """Another Cairn service this call needs did not answer."""

    kind = "UNAVAILABLE"


class DatabaseUnavailable(Unavailable):
    """The database could not be reached, or the connection was lost, while serving a call: a
    transient outage (a server restarting, a network blip), not a bug.

    `commit_unknown` says the connection was lost while the transaction was committing, or after
    part of the call had already been stored: the change may or may not be there, so only an
    idempotent call may be repeated."""

    def __init__(self, message: str, *, commit_unknown: bool = False) -> None:
        super().__init__(message)
        self.commit_unknown = commit_unknown
