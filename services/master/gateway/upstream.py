"""How the gateway reaches the gRPC API: in-process through the server's own interceptors and
servicers (services/common/local_calls.py) when the master hands them over, otherwise through one
channel to the master's own gRPC port (as grpc-gateway dials back into its own server).

Either way REST callers pass the same interceptors (authentication, principals) and see the same
errors as gRPC callers; the local path only skips the loopback hop that every read paid for.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

import grpc
from google.protobuf.message import Message

from cairn.wire import CHANNEL_OPTIONS
from services.common.local_calls import LocalCalls, LocalStream
from services.master.gateway.http_rules import RpcMethod

# Unary calls give up after this; streams (followed logs, signal watches) run without a deadline.
UNARY_TIMEOUT_S = 120.0

Metadata = Sequence[tuple[str, str]]


def dial_address(host: str, port: int) -> str:
    """Where a gateway process reaches the gRPC server bound to `host`: wildcard binds are
    reached on loopback."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host in ("::", "[::]"):
        host = "::1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


class StreamCall:
    """A started server stream: iterate for messages; cancel() from any thread stops it; close()
    from the thread that iterated, once it stopped, releases it."""

    def __init__(self, call: Any) -> None:
        self._call = call

    def __iter__(self) -> Iterator[Message]:
        return cast(Iterator[Message], iter(self._call))

    def cancel(self) -> None:
        self._call.cancel()

    def close(self) -> None:
        if isinstance(self._call, LocalStream):
            self._call.close()
        else:
            self._call.cancel()


class Upstream:
    def __init__(
        self,
        address: str,
        methods: Iterable[RpcMethod],
        unary_timeout_s: float = UNARY_TIMEOUT_S,
        local: LocalCalls | None = None,
    ):
        self.address = address
        self.channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._unary_timeout_s = unary_timeout_s
        self._local = local
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
                self._unary[method.full_path] = self.channel.unary_unary(
                    method.full_path, request_serializer=serialize, response_deserializer=deserialize
                )

    @property
    def in_process(self) -> bool:
        return self._local is not None

    def call_unary(
        self, method: RpcMethod, request: Message, metadata: Metadata, peer: str | None = None
    ) -> Message:
        """The response; grpc.RpcError when the call fails."""
        if self._local is not None:
            return self._local.unary(
                method.full_path, request, metadata, timeout_s=self._unary_timeout_s, peer=peer
            )
        callable_ = self._unary[method.full_path]
        return cast(Message, callable_(request, timeout=self._unary_timeout_s, metadata=tuple(metadata)))

    def call_stream(
        self, method: RpcMethod, request: Message, metadata: Metadata, peer: str | None = None
    ) -> StreamCall:
        """A started stream; its messages raise grpc.RpcError when it fails."""
        if self._local is not None:
            # The gateway prints every message it gets: a handler may hand over its JSON instead.
            stream = self._local.stream(method.full_path, request, metadata, peer=peer, rendered_json=True)
            return StreamCall(stream)
        return StreamCall(self._streams[method.full_path](request, metadata=tuple(metadata)))

    def close(self) -> None:
        self.channel.close()
