"""Domain errors of the checkpoint service. The gRPC edge maps each to a status code; the message
goes to the caller as is, so it names what is wrong (the field, the checkpoint)."""

from __future__ import annotations


class DomainError(Exception):
    pass


class InvalidArgument(DomainError):
    """The request is malformed; nothing was changed."""
