"""JSON bodies of large unary replies, keyed by the reply's own bytes.

The gateway still makes every gRPC call (authentication and all); when the reply is byte for byte
one it has already encoded — the same page of a list, polled by many clients while nothing changed
— the JSON is taken from here instead of being built again. Small replies are not worth it, and
replies that carry secrets (the login token) are never stored.
"""

from __future__ import annotations

import hashlib

from google.protobuf.message import Message

from services.common.lru import BoundedLru

# Below this many protobuf bytes, encoding is cheaper than hashing and bookkeeping.
MIN_REPLY_BYTES = 4096
MAX_TOTAL_BYTES = 64 * 1024 * 1024


class ReplyCache:
    def __init__(self, max_total_bytes: int = MAX_TOTAL_BYTES) -> None:
        self._max = max_total_bytes
        self._entries: BoundedLru[tuple[str, bool, bytes], bytes] = BoundedLru(
            max_total_bytes, cost=lambda _key, body: len(body)
        )

    @staticmethod
    def key_of(method: str, pretty: bool, reply: Message) -> tuple[str, bool, bytes] | None:
        """The key of a reply message (serialized once: upb's ByteSize serializes as well)."""
        serialized = reply.SerializeToString()
        if len(serialized) < MIN_REPLY_BYTES:
            return None
        return (method, pretty, hashlib.blake2b(serialized, digest_size=20).digest())

    def get(self, key: tuple[str, bool, bytes]) -> bytes | None:
        return self._entries.get(key)

    def put(self, key: tuple[str, bool, bytes], body: bytes) -> None:
        if len(body) <= self._max // 8:
            self._entries.put(key, body)
