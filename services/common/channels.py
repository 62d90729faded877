"""Client channels between Cairn processes: the shared wire settings plus the cluster token."""

from __future__ import annotations

import grpc

from cairn.wire import CHANNEL_OPTIONS, MAX_MESSAGE_BYTES, channel_with
from services.common.metadata import CLUSTER_TOKEN_KEY

__all__ = ["CHANNEL_OPTIONS", "MAX_MESSAGE_BYTES", "internal_channel"]


def internal_channel(
    address: str, cluster_token: str | None, credentials: grpc.ChannelCredentials | None = None
) -> grpc.Channel:
    """A channel to another Cairn process that presents the cluster token on every call: TLS with
    `credentials` (an agent to a master that serves TLS), plaintext without (the master's internal
    services, which listen on loopback)."""
    metadata = [(CLUSTER_TOKEN_KEY, cluster_token)] if cluster_token else []
    channel, _base = channel_with(address, metadata, credentials=credentials)
    return channel
