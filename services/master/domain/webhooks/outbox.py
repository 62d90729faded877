"""The outbox of posts owed to receivers (models.WebhookEvent): written in the unit of work of the
change that owes them, claimed by the sender with a lease in the database (a master that dies
mid-send leaves an event another run takes once the lease lapses; two masters never send one event
at once), then deleted when delivered or given up, or set due again after a failure.

The deferred-work queue (kernel/deferred_work.py) has the same lease and backoff, but it keeps one
item per (kind, subject) and runs one item at a time: events are many, each distinct, and a slow
receiver must not hold back checkpoint GC, so they have a table and a sender of their own."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update
from sqlalchemy.orm import Session

from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.store import models

# How long a claim holds: longer than one send's timeout, so a live sender never loses its claim.
LEASE_S = 60.0
_ERROR_CHARS = 2000
# Events one claim takes (Determined's batch size).
BATCH = 10


@dataclass(frozen=True)
class Claimed:
    id: int
    url: str
    payload: str
    attempts: int


def enqueue(ctx: MasterContext, w: Work, url: str, payload: str) -> None:
    """Owe `payload` to `url`, in the caller's unit of work; the sender is woken once it commits."""
    add(w.session, url, payload)
    w.later(ctx.webhook_wakeup.set)


def add(s: Session, url: str, payload: str) -> None:
    """Owe `payload` to `url` in transaction `s`; the caller wakes the sender after its commit."""
    now = utcnow()
    s.add(
        models.WebhookEvent(
            url=url,
            payload=payload,
            due_at=now,
            attempts=0,
            last_error="",
            claimed_by="",
            created_at=now,
        )
    )


def _claimable(now: object) -> ColumnElement[bool]:
    return or_(models.WebhookEvent.claimed_until.is_(None), models.WebhookEvent.claimed_until < now)


def any_due(ctx: MasterContext) -> bool:
    """Whether anything is due and unclaimed (a read, so that an idle sender writes nothing)."""
    now = utcnow()
    with ctx.db.read() as s:
        found = s.scalar(
            select(models.WebhookEvent.id).where(models.WebhookEvent.due_at <= now, _claimable(now)).limit(1)
        )
    return found is not None


def claim(ctx: MasterContext, holder: str, limit: int = BATCH) -> list[Claimed]:
    """Claim up to `limit` due events, oldest first. Each claim is a conditional update: of two
    masters that pick the same event, one changes the row and the other takes nothing."""
    now = utcnow()
    taken: list[Claimed] = []
    with ctx.unit_of_work() as w:
        candidates = w.session.scalars(
            select(models.WebhookEvent)
            .where(models.WebhookEvent.due_at <= now, _claimable(now))
            .order_by(models.WebhookEvent.due_at, models.WebhookEvent.id)
            .limit(limit)
        ).all()
        for row in candidates:
            changed = w.session.execute(
                update(models.WebhookEvent)
                .where(models.WebhookEvent.id == row.id, _claimable(now))
                .values(claimed_by=holder, claimed_until=now + timedelta(seconds=LEASE_S))
                .execution_options(synchronize_session=False)
            )
            if changed.rowcount == 1:  # type: ignore[attr-defined]
                taken.append(Claimed(row.id, row.url, row.payload, row.attempts))
    return taken


def _mine(event_id: int, holder: str) -> ColumnElement[bool]:
    return and_(models.WebhookEvent.id == event_id, models.WebhookEvent.claimed_by == holder)


def done(ctx: MasterContext, event_id: int, holder: str) -> None:
    """Delivered, or given up: the event goes."""
    with ctx.unit_of_work() as w:
        w.session.execute(
            delete(models.WebhookEvent)
            .where(_mine(event_id, holder))
            .execution_options(synchronize_session=False)
        )


def retry_later(ctx: MasterContext, event_id: int, holder: str, after_s: float, error: str) -> None:
    """A failed send: one more attempt recorded, due again in `after_s`."""
    with ctx.unit_of_work() as w:
        w.session.execute(
            update(models.WebhookEvent)
            .where(_mine(event_id, holder))
            .values(
                claimed_by="",
                claimed_until=None,
                attempts=models.WebhookEvent.attempts + 1,
                last_error=error[:_ERROR_CHARS],
                due_at=utcnow() + timedelta(seconds=after_s),
            )
            .execution_options(synchronize_session=False)
        )


def pending(ctx: MasterContext) -> int:
    """Events not yet delivered (for tests and the operator)."""
    with ctx.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(models.WebhookEvent)) or 0)
