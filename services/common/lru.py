"""A bounded least-recently-used map for the caches on request paths, shared between threads.

Hits take no lock: a dict lookup and an OrderedDict.move_to_end are each atomic under the GIL, and
an entry evicted between the two only loses its refresh. Only inserts and evictions take the lock.
With a lock on hits too, request threads queued behind whichever holder the interpreter had
switched away from: under REST load that waiting was most of a read's time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _one(_key: object, _value: object) -> int:
    return 1


class BoundedLru(Generic[K, V]):
    """Entries up to a total cost (by default, one per entry); the least recently used go first."""

    def __init__(self, max_cost: int, cost: Callable[[K, V], int] = _one) -> None:
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._max_cost = max_cost
        self._cost = cost
        self._total = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def total_cost(self) -> int:
        return self._total

    def get(self, key: K) -> V | None:
        value = self._entries.get(key)
        if value is not None:
            try:
                self._entries.move_to_end(key)
            except KeyError:
                pass
        return value

    def put(self, key: K, value: V) -> None:
        self.put_many({key: value})

    def put_many(self, items: Mapping[K, V]) -> None:
        if not items:
            return
        with self._lock:
            for key, value in items.items():
                old = self._entries.pop(key, None)
                if old is not None:
                    self._total -= self._cost(key, old)
                self._entries[key] = value
                self._total += self._cost(key, value)
            while self._total > self._max_cost and self._entries:
                dropped_key, dropped = self._entries.popitem(last=False)
                self._total -= self._cost(dropped_key, dropped)
