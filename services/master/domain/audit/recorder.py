"""Writing the audit trail off the calls' path: a call hands its AuditRecord to `record()`, which
appends it to a bounded queue in memory and returns (a lock and an append); one writer thread
stores what is queued every `interval_s`, or as soon as `batch_rows` are waiting, in one INSERT of
many rows in one transaction.

Why not in the change's own transaction. That would make the trail exactly as durable as the
changes: no change stored without its row. It would also cost every change an insert under the
master's process-wide lock (units of work are serialized: kernel/context.py), and the edge that
knows a call is a change (the interceptor, servicers/audit_interceptor.py) sees neither the
transactions nor whether there was one: a call may run several units of work (bulk actions, one
per id), none (a refused or failed call, which is worth recording all the same), or be run again
after a database outage (outage.py counts each thread's commits to know when that is safe: an
audit insert in the call's thread would be one more commit to count). So the trail is written
after the call, in batches, by a thread of its own, outside the process-wide lock (the table is
append-only: no transition reads it).

What that costs in durability, said plainly: events of the last `interval_s` (about a second)
are lost if the master's process dies before its writer stores them; a master that stops in order
stores them (close()). If calls outrun the writer for long (or the database is down longer than
the queue holds, `capacity` records), the newest records are dropped, never the calls: each drop
is counted in `cairn_audit_events_dropped_total` on /metrics, so a gap in the trail is never
silent. A write that fails (an outage) is tried again with its records kept at the front of the
queue; one whose commit was in doubt may then store a record twice, which beats losing it.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Table, insert

from services.common.logging import get_logger
from services.master.domain.audit import targets
from services.master.domain.audit.events import AuditRecord
from services.master.domain.kernel.outage import as_outage
from services.master.domain.kernel.telemetry import Telemetry
from services.master.store import models
from services.master.store.db import Database

log = get_logger(__name__)

_TABLE = cast(Table, models.AuditEvent.__table__)

# Records held while the writer is behind or the database is away: at a few hundred bytes each,
# a few MB at most, and minutes of a busy cluster's changes.
CAPACITY = 10_000
BATCH_ROWS = 500
INTERVAL_S = 1.0
# After a failed write, the writer waits this long before it tries again.
RETRY_AFTER_S = 1.0


def _row(record: AuditRecord) -> dict[str, Any]:
    return {
        "at": datetime.fromtimestamp(record.at, UTC),
        "user_id": record.user_id,
        "username": record.username,
        "actor": record.actor,
        "allocation_id": record.allocation_id,
        "method": record.method,
        "targets": targets.encode(record.targets),
        "outcome": record.outcome,
        "error": record.error,
        "address": record.address,
        "transport": record.transport,
        "duration_ms": round(record.duration_ms, 3),
    }


class AuditRecorder:
    def __init__(
        self,
        db: Database,
        telemetry: Telemetry,
        *,
        capacity: int = CAPACITY,
        batch_rows: int = BATCH_ROWS,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self._db = db
        self._written = telemetry.audit_events_written
        self._dropped = telemetry.audit_events_dropped
        self._capacity = capacity
        self._batch_rows = batch_rows
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._queue: list[AuditRecord] = []
        self._wake = threading.Event()
        self._closed = threading.Event()
        # One flush at a time: the writer's, or a caller's (close(), tests).
        self._flushing = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)

    def record(self, record: AuditRecord) -> None:
        """Queue `record` for the writer; never waits for the database. A full queue drops it
        (counted)."""
        with self._lock:
            waiting = len(self._queue)
            if waiting < self._capacity:
                self._queue.append(record)
                waiting += 1
            else:
                waiting = -1
        if waiting < 0:
            self._dropped.add()
        elif waiting == self._batch_rows:
            self._wake.set()  # once, as the queue reaches a batch: setting a set Event costs a lock

    @property
    def pending(self) -> int:
        return len(self._queue)

    def flush(self) -> int:
        """Store everything queued now, in one transaction; the number stored. A failed write
        keeps its records at the front of the queue (as many as fit) and raises."""
        with self._flushing:
            with self._lock:
                batch, self._queue = self._queue, []
            if not batch:
                return 0
            try:
                with self._db.transaction() as session:
                    # Core's executemany: the ORM's bulk insert cost twice as much a row.
                    session.execute(insert(_TABLE), [_row(r) for r in batch])
            except BaseException:
                with self._lock:
                    room = max(0, self._capacity - len(self._queue))
                    self._queue[:0] = batch[:room]
                lost = len(batch) - min(room, len(batch))
                if lost:
                    self._dropped.add(lost)
                raise
            self._written.add(len(batch))
            return len(batch)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the writer and store what is still queued (a master stopping in order loses none)."""
        self._closed.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        try:
            self.flush()
        except Exception as exc:
            log.warning("audit events not stored at stop", pending=self.pending, error=str(exc))

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._closed.is_set():
                return  # close() stores the rest
            try:
                self.flush()
            except Exception as exc:
                outage = as_outage(exc)
                if outage is not None:
                    log.warning("audit events wait for the database", pending=self.pending, error=str(outage))
                else:
                    log.exception("storing audit events failed; trying again", pending=self.pending)
                self._closed.wait(RETRY_AFTER_S)
