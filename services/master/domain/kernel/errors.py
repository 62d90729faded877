"""The master's domain errors: the kinds every service shares (services/common/errors.py)."""

from __future__ import annotations

from services.common.errors import (
    Aborted,
    AlreadyExists,
    DatabaseUnavailable,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from services.common.errors import ServiceError as DomainError

__all__ = [
    "Aborted",
    "AlreadyExists",
    "DatabaseUnavailable",
    "DomainError",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
]
