"""JSON bodies of large unary replies, keyed by the reply's own bytes.

The gateway still makes every gRPC call (authentication and all); when the reply is byte for byte
one it has already encoded — the same page of a list, polled by many clients while nothing changed
— the JSON is taken from here instead of being built again. Small replies are not worth it, and
replies that carry secrets (the login token) are never stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections import OrderedDict

from google.protobuf.message import Message

# Below this many protobuf bytes, encoding is cheaper than hashing and bookkeeping.
MIN_REPLY_BYTES = 4096
MAX_TOTAL_BYTES = 64 * 1024 * 1024


class ReplyCache:
    def __init__(self, max_total_bytes: int = MAX_TOTAL_BYTES) -> None:
        self._entries: OrderedDict[tuple[str, bool, bytes], bytes] = OrderedDict()
        self._total = 0
        self._max = max_total_bytes
        self._lock = threading.Lock()

    @staticmethod
    def key(method: str, pretty: bool, reply: bytes) -> tuple[str, bool, bytes] | None:
        if len(reply) < MIN_REPLY_BYTES:
            return None
        return (method, pretty, hashlib.blake2b(reply, digest_size=20).digest())

    @staticmethod
    def key_of(method: str, pretty: bool, reply: Message) -> tuple[str, bool, bytes] | None:
        """The key of a reply message; its size is known without serializing it."""
        if reply.ByteSize() < MIN_REPLY_BYTES:
            return None
        return ReplyCache.key(method, pretty, reply.SerializeToString())

    def get(self, key: tuple[str, bool, bytes]) -> bytes | None:
        # No lock on hits (the lock guards inserts and evictions): a lookup and a move_to_end are
        # each atomic under the GIL, and an entry evicted between the two only misses its refresh.
        body = self._entries.get(key)
        if body is not None:
            with contextlib.suppress(KeyError):
                self._entries.move_to_end(key)
        return body

    def put(self, key: tuple[str, bool, bytes], body: bytes) -> None:
        if len(body) > self._max // 8:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = body
            self._total += len(body)
            while self._total > self._max:
                _, dropped = self._entries.popitem(last=False)
                self._total -= len(dropped)
