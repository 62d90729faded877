"""Below which metrics id a reader has read for good, on PostgreSQL.

A report's id is taken at its INSERT, not at its COMMIT, and the reports of different trials are
stored side by side (a lock per trial): a later id can be committed while an earlier one is still
on its way. A reader that goes on from the highest id it read (the learning curves' cache) would
step over the earlier one for good. Only this process inserts metrics, so it counts its own
inserts that are not committed yet. Each records, as it begins, the highest id a reader has seen
committed so far; the ids it takes are above that (the sequence only grows). A read may then count
as read for good everything up to the lowest such mark of the inserts on their way while it read,
and up to what it saw beyond that only when none was.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class ReadStart:
    """What was on its way as a read began."""

    begun: int
    lowest_mark: int | None
    seen: int


class MetricInserts:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Inserts not committed or rolled back yet: token → the highest id seen as it began.
        self._open: dict[int, int] = {}
        # How many have begun (each one's token is the count before it).
        self._begun = 0
        self._seen = 0

    def begin(self) -> int:
        """Before an insert takes its ids; the token goes to end() once its transaction is over."""
        with self._lock:
            token = self._begun
            self._open[token] = self._seen
            self._begun += 1
            return token

    def end(self, token: int) -> None:
        """Its transaction committed or rolled back."""
        with self._lock:
            self._open.pop(token, None)

    def read_start(self) -> ReadStart:
        with self._lock:
            return ReadStart(self._begun, min(self._open.values(), default=None), self._seen)

    def read_for_good(self, start: ReadStart, highest: int) -> int:
        """After a read that began at `start` and saw ids up to `highest` committed: the id up to
        which it read everything that will ever be there."""
        with self._lock:
            began_since = self._begun != start.begun
            self._seen = max(self._seen, highest)
        settled = highest
        if start.lowest_mark is not None:
            settled = min(settled, start.lowest_mark)
        if began_since:
            # One that began during the read may have taken its ids before the read's snapshot:
            # they are above what had been seen when the read began.
            settled = min(settled, start.seen)
        return settled
