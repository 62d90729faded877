"""The cluster-wide message as GetMaster (the one showing now) and `det master cluster-message get`
(the newest, unless it has ended) read it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from services.master.store import models


def _newest(s: Session) -> models.ClusterMessage | None:
    return s.scalars(
        select(models.ClusterMessage)
        .order_by(models.ClusterMessage.created_time.desc(), models.ClusterMessage.id.desc())
        .limit(1)
    ).first()


def current_message(s: Session, now: datetime) -> models.ClusterMessage | None:
    """The newest message unless it has ended; it may not have started yet."""
    newest = _newest(s)
    if newest is None or (newest.end_time is not None and newest.end_time <= now):
        return None
    return newest


def showing_message(s: Session, now: datetime) -> models.ClusterMessage | None:
    """The message to show now: the newest, started and not ended."""
    current = current_message(s, now)
    return current if current is not None and current.start_time <= now else None


def unended_messages(s: Session, now: datetime) -> list[models.ClusterMessage]:
    """Messages not ended by now (at most one in practice: each set ends those before it)."""
    return list(
        s.scalars(
            select(models.ClusterMessage).where(
                or_(models.ClusterMessage.end_time.is_(None), models.ClusterMessage.end_time > now)
            )
        )
    )
