"""The gateway's side of the gRPC hop: one channel to the master's own gRPC port, and a callable
per RPC built from its descriptors (as grpc-gateway dials back into its own server).

Going through the real gRPC server, rather than calling servicers directly, means REST callers
pass the same interceptors (authentication, principals) and see the same errors as gRPC callers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

import grpc
from google.protobuf.message import Message

from cairn.wire import CHANNEL_OPTIONS
from services.master.gateway.http_rules import RpcMethod

# Unary calls give up after this; streams (followed logs, signal watches) run without a deadline.
UNARY_TIMEOUT_S = 120.0

Metadata = Sequence[tuple[str, str]]


class StreamCall:
    """A started server stream: iterate for messages; cancel() from any thread stops it."""

    def __init__(self, call: Any) -> None:
        self._call = call

    def __iter__(self) -> Iterator[Message]:
        return cast(Iterator[Message], iter(self._call))

    def cancel(self) -> None:
        self._call.cancel()


class Upstream:
    def __init__(self, address: str, methods: Iterable[RpcMethod], unary_timeout_s: float = UNARY_TIMEOUT_S):
        self.address = address
        self.channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._unary_timeout_s = unary_timeout_s
        self._unary: dict[str, grpc.UnaryUnaryMultiCallable] = {}
        self._streams: dict[str, grpc.UnaryStreamMultiCallable] = {}
        for method in methods:
            serialize = method.request_type.SerializeToString
            deserialize = method.response_type.FromString
            if method.server_streaming:
                self._streams[method.full_path] = self.channel.unary_stream(
                    method.full_path, request_serializer=serialize, response_deserializer=deserialize
                )
            else:
                # Replies arrive as bytes: the gateway may have encoded the very same bytes before.
                self._unary[method.full_path] = self.channel.unary_unary(
                    method.full_path, request_serializer=serialize, response_deserializer=None
                )

    def call_unary_raw(self, method: RpcMethod, request: Message, metadata: Metadata) -> bytes:
        """The serialized response; grpc.RpcError when the call fails."""
        callable_ = self._unary[method.full_path]
        return cast(bytes, callable_(request, timeout=self._unary_timeout_s, metadata=tuple(metadata)))

    def call_unary(self, method: RpcMethod, request: Message, metadata: Metadata) -> Message:
        """The response; grpc.RpcError when the call fails."""
        return method.response_type.FromString(self.call_unary_raw(method, request, metadata))

    def call_stream(self, method: RpcMethod, request: Message, metadata: Metadata) -> StreamCall:
        return StreamCall(self._streams[method.full_path](request, metadata=tuple(metadata)))

    def close(self) -> None:
        self.channel.close()
