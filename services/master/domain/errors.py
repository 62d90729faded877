"""Domain errors. The gRPC edge maps each kind to a status code; the message goes to the caller as is,
so it must name what is wrong (the field, the id, the state)."""

from __future__ import annotations


class DomainError(Exception):
    """Base class; `kind` names the gRPC status the edge answers with."""

    kind = "INTERNAL"


class InvalidArgument(DomainError):
    kind = "INVALID_ARGUMENT"


class NotFound(DomainError):
    kind = "NOT_FOUND"


class AlreadyExists(DomainError):
    kind = "ALREADY_EXISTS"


class FailedPrecondition(DomainError):
    kind = "FAILED_PRECONDITION"


class Unauthenticated(DomainError):
    kind = "UNAUTHENTICATED"


class PermissionDenied(DomainError):
    kind = "PERMISSION_DENIED"


class Unavailable(DomainError):
    """Another Cairn service this call needs did not answer."""

    kind = "UNAVAILABLE"
