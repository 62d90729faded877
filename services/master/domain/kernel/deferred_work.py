"""Work the master owes after a commit (checkpoint GC, deletions): a durable outbox.

Whatever owes a side effect writes it here in its own unit of work (`owe`), so a master that stops
between the commit and the work loses nothing. The deferred-work loop (deferred_loop.py) claims due
items, runs them, and either deletes them (done) or sets them due again later. Claims are leases in
the database: a master that dies mid-run leaves an item that another run (or the next start) takes
once the lease lapses, and two masters sharing a database never run the same item at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update

from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.store import models

# The kinds of work, each run by one handler (deferred_loop.py). Subjects are the ids named.
CHECKPOINT_GC = "checkpoint_gc"  # an ended experiment's checkpoints, by its policy
DELETE_EXPERIMENT = "delete_experiment"  # a DELETING experiment's files, then its rows
FINISH_PROJECT_DELETION = "finish_project_deletion"  # a project, once its experiments are gone
FINISH_WORKSPACE_DELETION = "finish_workspace_deletion"  # a workspace, likewise
STOP_TRIALS = "stop_trials"  # a canceled or killed experiment's trials beyond the first few hundred

# How long a claim holds without renewal: the runner renews it every third of this while it runs.
LEASE_S = 60.0
_ERROR_CHARS = 2000


@dataclass(frozen=True)
class Backoff:
    """Exponential, capped, with jitter: the n-th failure waits between half and all of
    min(cap, first * 2**(n-1)), so retries from many items (or masters) spread out."""

    first_s: float = 1.0
    cap_s: float = 60.0

    def delay(self, attempts: int) -> float:
        full = min(self.cap_s, self.first_s * 2 ** max(0, attempts - 1))
        return full / 2 + random.uniform(0, full / 2)


@dataclass(frozen=True)
class Claimed:
    id: int
    kind: str
    subject_id: int
    revision: int
    attempts: int


def owe(w: Work, kind: str, subject_id: int) -> None:
    """Record, in the caller's transaction, that `kind` is owed for `subject_id`, due now. Owed
    again while pending or running: one item, due now, its failures forgotten."""
    now = utcnow()
    row = w.session.scalar(
        select(models.DeferredWork).where(
            models.DeferredWork.kind == kind, models.DeferredWork.subject_id == subject_id
        )
    )
    if row is None:
        w.session.add(
            models.DeferredWork(
                kind=kind,
                subject_id=subject_id,
                revision=1,
                due_at=now,
                attempts=0,
                last_error="",
                claimed_by="",
                created_at=now,
            )
        )
        return
    row.revision += 1
    row.due_at = now
    row.attempts = 0
    row.last_error = ""


def is_owed(w: Work, kind: str, subject_ids: list[int]) -> bool:
    if not subject_ids:
        return False
    return bool(
        w.session.scalar(
            select(func.count())
            .select_from(models.DeferredWork)
            .where(models.DeferredWork.kind == kind, models.DeferredWork.subject_id.in_(subject_ids))
        )
    )


def _claimable(now: datetime) -> ColumnElement[bool]:
    return or_(models.DeferredWork.claimed_until.is_(None), models.DeferredWork.claimed_until < now)


def next_due(ctx: MasterContext) -> bool:
    """Whether anything is due and unclaimed (a read, so that an idle loop writes nothing)."""
    now = utcnow()
    with ctx.db.read() as s:
        return (
            s.scalar(
                select(models.DeferredWork.id)
                .where(models.DeferredWork.due_at <= now, _claimable(now))
                .limit(1)
            )
            is not None
        )


def claim_next(ctx: MasterContext, holder: str) -> Claimed | None:
    """Claim the item due longest, if any. The claim is a conditional update: of two masters that
    pick the same item, one changes the row and the other changes nothing and takes none."""
    now = utcnow()
    with ctx.unit_of_work() as w:
        candidates = w.session.scalars(
            select(models.DeferredWork)
            .where(models.DeferredWork.due_at <= now, _claimable(now))
            .order_by(models.DeferredWork.due_at, models.DeferredWork.id)
            .limit(5)
        ).all()
        for row in candidates:
            claimed = w.session.execute(
                update(models.DeferredWork)
                .where(models.DeferredWork.id == row.id, _claimable(now))
                .values(claimed_by=holder, claimed_until=now + timedelta(seconds=LEASE_S))
                .execution_options(synchronize_session=False)
            )
            if claimed.rowcount == 1:  # type: ignore[attr-defined]
                return Claimed(row.id, row.kind, row.subject_id, row.revision, row.attempts)
    return None


def _mine(item: Claimed, holder: str) -> ColumnElement[bool]:
    return and_(models.DeferredWork.id == item.id, models.DeferredWork.claimed_by == holder)


def renew(ctx: MasterContext, item: Claimed, holder: str) -> None:
    with ctx.unit_of_work() as w:
        w.session.execute(
            update(models.DeferredWork)
            .where(_mine(item, holder))
            .values(claimed_until=utcnow() + timedelta(seconds=LEASE_S))
            .execution_options(synchronize_session=False)
        )


def complete(ctx: MasterContext, item: Claimed, holder: str) -> None:
    """Done: the item goes, unless it was owed again meanwhile (then it is due again, now)."""
    with ctx.unit_of_work() as w:
        gone = w.session.execute(
            delete(models.DeferredWork)
            .where(_mine(item, holder), models.DeferredWork.revision == item.revision)
            .execution_options(synchronize_session=False)
        )
        if gone.rowcount == 0:  # type: ignore[attr-defined]
            _release(w, item, holder)


def retry(ctx: MasterContext, item: Claimed, holder: str, after_s: float, error: str | None) -> None:
    """Not done: due again in `after_s`. With an error, one more failed attempt is recorded."""
    with ctx.unit_of_work() as w:
        values: dict[str, object] = {"due_at": utcnow() + timedelta(seconds=after_s)}
        if error is not None:
            values["attempts"] = models.DeferredWork.attempts + 1
            values["last_error"] = error[:_ERROR_CHARS]
        changed = w.session.execute(
            update(models.DeferredWork)
            .where(_mine(item, holder), models.DeferredWork.revision == item.revision)
            .values(claimed_by="", claimed_until=None, **values)
            .execution_options(synchronize_session=False)
        )
        if changed.rowcount == 0:  # type: ignore[attr-defined]
            _release(w, item, holder)  # owed again meanwhile: due now, as owing it said


def _release(w: Work, item: Claimed, holder: str) -> None:
    w.session.execute(
        update(models.DeferredWork)
        .where(_mine(item, holder))
        .values(claimed_by="", claimed_until=None)
        .execution_options(synchronize_session=False)
    )
