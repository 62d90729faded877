"""Pulling credentials out of gRPC metadata, by the keys of the wire (cairn.metadata_keys)."""

from __future__ import annotations

from collections.abc import Iterable

from cairn.metadata_keys import (
    AGENT_CREDENTIAL_KEY,
    ALLOCATION_TOKEN_KEY,
    CLUSTER_TOKEN_KEY,
    GATEWAY_KEY_KEY,
    USER_TOKEN_KEYS,
)

__all__ = [
    "AGENT_CREDENTIAL_KEY",
    "ALLOCATION_TOKEN_KEY",
    "CLUSTER_TOKEN_KEY",
    "GATEWAY_KEY_KEY",
    "USER_TOKEN_KEYS",
    "Metadata",
    "allocation_token",
    "metadata_value",
    "user_token",
]

Metadata = Iterable[tuple[str, str | bytes]]


def _strip_bearer(value: str) -> str:
    value = value.strip()
    if value.lower().startswith("bearer "):
        return value[7:].strip()
    return value


def metadata_value(metadata: Metadata | None, *keys: str) -> str | None:
    """The first value among `keys` (in the order given), as text."""
    if not metadata:
        return None
    found: dict[str, str] = {}
    for key, value in metadata:
        k = key.lower()
        if k in keys and k not in found:
            found[k] = value.decode() if isinstance(value, bytes) else value
    for key in keys:
        if key in found:
            return found[key]
    return None


def user_token(metadata: Metadata | None) -> str | None:
    raw = metadata_value(metadata, *USER_TOKEN_KEYS)
    return _strip_bearer(raw) if raw else None


def allocation_token(metadata: Metadata | None) -> str | None:
    raw = metadata_value(metadata, ALLOCATION_TOKEN_KEY)
    return _strip_bearer(raw) if raw else None
