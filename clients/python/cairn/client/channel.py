"""The client's gRPC channel to the master: the shared wire settings, the bearer token, a
default deadline on unary calls, and unary calls retried through a short outage behind the master."""

from __future__ import annotations

import grpc

from cairn.client.unavailable_retry import retrying_unavailable
from cairn.metadata_keys import USER_TOKEN_KEY
from cairn.wire import MAX_MESSAGE_BYTES, channel_with

__all__ = ["DEFAULT_CALL_TIMEOUT_S", "MAX_MESSAGE_BYTES", "open_channel"]

# A unary call that takes longer than this has hung; streams (logs) run without a deadline.
DEFAULT_CALL_TIMEOUT_S = 120.0


def open_channel(
    target: str,
    token: str | None,
    unary_timeout: float | None = DEFAULT_CALL_TIMEOUT_S,
    credentials: grpc.ChannelCredentials | None = None,
) -> tuple[grpc.Channel, grpc.Channel]:
    """(the channel to call through, the underlying channel to close); TLS with `credentials`."""
    metadata = [(USER_TOKEN_KEY, f"Bearer {token}")] if token else []
    channel, base = channel_with(target, metadata, unary_timeout, credentials)
    return retrying_unavailable(channel), base
