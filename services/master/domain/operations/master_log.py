"""The master's own log (`det master logs`): a bounded in-memory ring of the master process's recent
log records, fed by its logging setup, and the read that pages through it and follows new records.

In memory on purpose, as Determined's master keeps its log in an in-memory buffer too: the record
that lasts is the process's stderr, which whatever runs the master keeps (a terminal, systemd,
Kubernetes, `cairn cluster up`'s log files). Writing every line to the database as well would make
each log call a transaction, and a master that cannot reach its database is exactly when its log
matters. The ring is bounded in records and in bytes, so a chatty master holds its recent past and
nothing more; ids keep counting across what the ring dropped, so a reader can tell.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from services.master.domain.kernel.errors import InvalidArgument

MAX_RECORDS = 10_000
MAX_BYTES = 8 * 1024 * 1024
# A longer message (a huge traceback, a dumped request) is cut here, saying so.
MAX_MESSAGE_CHARS = 16 * 1024
# Bookkeeping per record beyond its message text, counted against MAX_BYTES.
RECORD_OVERHEAD_BYTES = 96
# Records sent per read of the ring, and how often a follower looks again without a wake-up.
READ_BATCH = 1000
FOLLOW_POLL_S = 1.0


@dataclass(frozen=True)
class MasterLogRecord:
    id: int
    timestamp: datetime
    # Determined's LogLevel names without their prefix: TRACE, DEBUG, INFO, WARNING, ERROR, CRITICAL.
    level: str
    message: str


def level_name(levelno: int) -> str:
    """The stdlib level number as one of Determined's log levels."""
    if levelno >= logging.CRITICAL:
        return "CRITICAL"
    if levelno >= logging.ERROR:
        return "ERROR"
    if levelno >= logging.WARNING:
        return "WARNING"
    if levelno >= logging.INFO:
        return "INFO"
    if levelno >= logging.DEBUG:
        return "DEBUG"
    return "TRACE"


def _size(record: MasterLogRecord) -> int:
    return len(record.message.encode("utf-8", "replace")) + RECORD_OVERHEAD_BYTES


class MasterLogRing:
    """Recent records, oldest first, with ids from 1 that never repeat. Thread-safe: records arrive
    from every thread that logs. It never logs itself (it is fed by logging)."""

    def __init__(
        self,
        max_records: int = MAX_RECORDS,
        max_bytes: int = MAX_BYTES,
        max_message_chars: int = MAX_MESSAGE_CHARS,
    ) -> None:
        if max_records < 1 or max_bytes < 1 or max_message_chars < 1:
            raise ValueError("the master log ring needs room for at least one record")
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._max_message_chars = max_message_chars
        self._records: deque[MasterLogRecord] = deque()
        self._bytes = 0
        self._next_id = 1
        self._closed = False
        self._changed = threading.Condition()

    def append(self, created: float, levelno: int, message: str) -> None:
        """Take one log record (`created`: seconds since the epoch, as logging.LogRecord has it)."""
        if len(message) > self._max_message_chars:
            cut = len(message) - self._max_message_chars
            message = f"{message[: self._max_message_chars]}… [{cut} more characters not kept]"
        with self._changed:
            record = MasterLogRecord(
                id=self._next_id,
                timestamp=datetime.fromtimestamp(created, UTC),
                level=level_name(levelno),
                message=message,
            )
            self._next_id += 1
            self._records.append(record)
            self._bytes += _size(record)
            # The newest record always stays, even one that alone is over the byte bound.
            while len(self._records) > 1 and (
                len(self._records) > self._max_records or self._bytes > self._max_bytes
            ):
                self._bytes -= _size(self._records.popleft())
            self._changed.notify_all()

    def window(self) -> tuple[int, int]:
        """(id of the oldest record held, id the next record will get); equal when empty."""
        with self._changed:
            return self._first_id(), self._next_id

    def _first_id(self) -> int:
        return self._records[0].id if self._records else self._next_id

    def after(self, after_id: int, limit: int) -> list[MasterLogRecord]:
        """Up to `limit` records with ids above `after_id`, oldest first (from the oldest held when
        the ring has dropped the ones right after `after_id`)."""
        with self._changed:
            start = max(after_id + 1 - self._first_id(), 0)
            return list(itertools.islice(self._records, start, start + limit))

    def wait(self, after_id: int, timeout: float) -> None:
        """Return once a record with an id above `after_id` exists, the ring is closed, or
        `timeout` seconds have passed."""
        with self._changed:
            self._changed.wait_for(lambda: self._next_id > after_id + 1 or self._closed, timeout)

    @property
    def closed(self) -> bool:
        with self._changed:
            return self._closed

    def close(self) -> None:
        """The master is stopping: followers finish."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def stats(self) -> tuple[int, int]:
        """(records held, bytes counted): for tests and diagnostics."""
        with self._changed:
            return len(self._records), self._bytes


def read_master_logs(
    ring: MasterLogRing, *, offset: int, limit: int, follow: bool, is_active: Callable[[], bool]
) -> Iterator[MasterLogRecord]:
    """Determined's MasterLogs: skip `offset` of the records held (negative: start that many from
    the newest), send at most `limit` (0: all), and with `follow` keep sending new records until
    the caller goes away or the master stops."""
    if limit < 0:
        raise InvalidArgument(f"limit: must be >= 0 (got {limit})")
    if follow and limit:
        raise InvalidArgument("limit: must be 0 when following")
    first, next_id = ring.window()
    held = next_id - first
    start = first + (offset if offset >= 0 else max(held + offset, 0))
    last = start - 1
    sent = 0
    while True:
        want = READ_BATCH if not limit else min(READ_BATCH, limit - sent)
        batch = ring.after(last, want)
        for record in batch:
            yield record
            last = record.id
            sent += 1
        if limit and sent >= limit:
            return
        if len(batch) == want:
            continue
        if not follow or ring.closed or not is_active():
            return
        ring.wait(last, FOLLOW_POLL_S)
