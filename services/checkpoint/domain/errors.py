"""Domain errors of the checkpoint service. The gRPC edge maps each to a status code; the message
goes to the caller as is, so it names what is wrong (the field, the checkpoint)."""

from __future__ import annotations

from services.common.errors import InvalidArgument, ServiceError

DomainError = ServiceError

__all__ = ["DomainError", "InvalidArgument"]
