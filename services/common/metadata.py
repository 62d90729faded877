"""gRPC metadata keys Cairn reads and writes, and helpers to pull credentials out of them."""

from __future__ import annotations

from collections.abc import Iterable

# A user's session token. `authorization` is what the CLI sends; `x-user-token` is Determined's
# native gRPC key and `grpcgateway-authorization` what a grpc-gateway forwards.
USER_TOKEN_KEYS = ("authorization", "x-user-token", "grpcgateway-authorization")
# An allocation's token, held by trial code (Determined: `x-allocation-token`).
ALLOCATION_TOKEN_KEY = "x-allocation-token"
# The shared secret that internal services and agents present to each other.
CLUSTER_TOKEN_KEY = "x-cairn-cluster-token"

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
