"""Keeping the audit trail within its bounds (the master's settings: `--audit-retention-days`,
`--audit-max-rows`, 0 for no bound): a background loop deletes the oldest rows past either bound,
in batches of `batch_rows`, each its own short transaction, at most `max_batches` a pass, so a
trail that grew past its bounds (a lowered setting, a master that was down) shrinks over a few
passes without ever holding the database for long.

The row bound is kept by id: ids only grow and pruning takes the oldest, so the newest
`max_rows` ids are the rows kept (fewer where ids have gaps, as a rolled-back insert leaves),
found by two index lookups instead of a count of the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, delete, func, select

from services.common.logging import get_logger
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.loops import BackgroundLoop
from services.master.store import models
from services.master.store.db import Database

log = get_logger(__name__)

BATCH_ROWS = 5_000
MAX_BATCHES_PER_PASS = 20
PERIOD_S = 60.0

Event = models.AuditEvent


@dataclass(frozen=True)
class Retention:
    """How much of the trail is kept: rows younger than `days`, and the newest `max_rows`
    (0: no bound of that kind)."""

    days: float
    max_rows: int


def _delete_batches(
    db: Database, oldest_first: Select[Any], batch_rows: int, batches: int
) -> tuple[int, int]:
    """Delete the rows `oldest_first` selects, `batch_rows` a transaction, for at most `batches`
    transactions; (rows deleted, transactions used)."""
    deleted = used = 0
    while used < batches:
        with db.transaction() as session:
            result = session.execute(delete(Event).where(Event.id.in_(oldest_first.limit(batch_rows))))
        used += 1
        count = int(getattr(result, "rowcount", 0) or 0)
        deleted += count
        if count < batch_rows:
            break
    return deleted, used


def prune(
    db: Database,
    retention: Retention,
    now: datetime,
    *,
    batch_rows: int = BATCH_ROWS,
    max_batches: int = MAX_BATCHES_PER_PASS,
) -> int:
    """Delete rows past `retention` as of `now`, oldest first, in at most `max_batches`
    transactions; the number deleted."""
    deleted, left = 0, max_batches
    if retention.days > 0 and left > 0:
        cutoff = now - timedelta(days=retention.days)
        old = select(Event.id).where(Event.at < cutoff).order_by(Event.at, Event.id)
        count, used = _delete_batches(db, old, batch_rows, left)
        deleted, left = deleted + count, left - used
    if retention.max_rows > 0 and left > 0:
        with db.read() as session:
            newest = session.scalar(select(func.max(Event.id)))
        if newest is not None and newest > retention.max_rows:
            beyond = select(Event.id).where(Event.id <= newest - retention.max_rows).order_by(Event.id)
            count, _ = _delete_batches(db, beyond, batch_rows, left)
            deleted += count
    return deleted


def retention_of(ctx: MasterContext) -> Retention:
    settings = ctx.settings
    return Retention(days=settings.audit_retention_days, max_rows=settings.audit_max_rows)


def start(ctx: MasterContext, period_s: float = PERIOD_S) -> BackgroundLoop | None:
    """The pruning loop, started; None when the trail is kept without bounds."""
    retention = retention_of(ctx)
    if retention.days <= 0 and retention.max_rows <= 0:
        return None

    def step() -> None:
        deleted = prune(ctx.db, retention_of(ctx), utcnow())
        if deleted:
            log.info("audit events pruned", deleted=deleted)

    loop = BackgroundLoop(ctx, "audit-retention", step, period_s=period_s)
    loop.start()
    return loop
