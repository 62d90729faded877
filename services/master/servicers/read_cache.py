"""A cache of read answers that is never stale: an entry is used only while no change has been
committed since it was computed (MasterContext.data_version).

On a large, quiet database — the common case for lists and dashboards, and what many clients
polling the same pages look like — repeated reads cost a dictionary lookup instead of queries and
message building. Any committed write makes every entry outdated at once; an entry computed while
a write was in flight is stored under the version it started from, so it is never served after it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from google.protobuf.message import Message

from services.common.lru import BoundedLru
from services.master.domain.kernel.context import MasterContext

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ReadCache:
    def __init__(self, ctx: MasterContext, max_entries: int = 1024) -> None:
        self._ctx = ctx
        self._max = max_entries
        self._entries: BoundedLru[tuple[str, bytes, Hashable], tuple[int, object]] = BoundedLru(max_entries)

    def get(self, method: str, request: Message, compute: Callable[[], T], viewer: Hashable = None) -> T:
        """`viewer`: what the answer depends on of its caller (a listing's readable workspaces:
        identity/access.py), so callers who see different things never share an answer."""
        if self._max <= 0:
            return compute()
        key = (method, request.SerializeToString(deterministic=True), viewer)
        version = self._ctx.data_version
        hit = self._entries.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]  # type: ignore[return-value]
        result = compute()
        self._entries.put(key, (version, result))
        return result


class RowCache(Generic[K, V]):
    """Per-row read answers under the same rule as ReadCache: a row computed at data version v is
    served only while the version is still v.

    A list page shares most of its rows with its neighbours (offset 300 and offset 301 have 99
    experiments in common), so caching whole answers keyed by the request recomputes the same rows
    for every offset, sort order and page size; rows cached one by one are built once.
    """

    def __init__(self, ctx: MasterContext, max_entries: int) -> None:
        self._ctx = ctx
        self._max = max_entries
        self._entries: BoundedLru[K, tuple[int, V]] = BoundedLru(max_entries)

    def get_many(self, keys: list[K], version: int) -> dict[K, V]:
        found: dict[K, V] = {}
        if self._max <= 0:
            return found
        for key in keys:
            hit = self._entries.get(key)
            if hit is not None and hit[0] == version:
                found[key] = hit[1]
        return found

    def put_many(self, version: int, rows: dict[K, V]) -> None:
        """Store rows computed from reads that started at `version` (read before the queries)."""
        if self._max > 0:
            self._entries.put_many({key: (version, value) for key, value in rows.items()})
