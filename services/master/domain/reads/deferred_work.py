"""Work the master owes (domain/kernel/deferred_work.py), counted by kind for the /metrics gauges: how much
is owed, and how much of it has failed at least once since it was owed (a GC or deletion that the
checkpoint service or storage keeps refusing shows here before anyone reads the master's log)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from services.master.store import models


@dataclass(frozen=True)
class OwedWork:
    kind: str
    owed: int
    failing: int


def owed_work(s: Session) -> list[OwedWork]:
    table = models.DeferredWork
    rows = s.execute(
        select(table.kind, func.count(), func.sum(case((table.attempts > 0, 1), else_=0)))
        .group_by(table.kind)
        .order_by(table.kind)
    ).all()
    return [OwedWork(str(kind), int(owed), int(failing or 0)) for kind, owed, failing in rows]
