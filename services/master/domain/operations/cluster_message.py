"""The cluster-wide message (Determined's cluster message): an admin sets one with a start and an
optional end (`det master cluster-message set -m ... [-s START] [-e END | -d DURATION]`), everyone
sees it while it is showing (GetMaster, the WebUI's banner), and an admin clears it. One at a time:
setting a message ends the ones before it. Kept in the database, so it outlives a restart; an ended
message is never shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.go_duration import parse_go_duration
from services.master.domain.reads import cluster_message as reads
from services.master.store import models

# Determined's ClusterMessageMaxLength (characters, not bytes).
MAX_MESSAGE_CHARS = 250


@dataclass(frozen=True)
class ClusterMessage:
    message: str
    start_time: datetime
    end_time: datetime | None
    created_time: datetime


def _view(row: models.ClusterMessage | None) -> ClusterMessage | None:
    if row is None:
        return None
    return ClusterMessage(row.message, row.start_time, row.end_time, row.created_time)


def _end_of(start: datetime, end: datetime | None, duration: str | None) -> datetime | None:
    if end is not None and duration is not None:
        raise InvalidArgument("end_time, duration: give one or neither (they are mutually exclusive)")
    if duration is None:
        return end
    try:
        length = parse_go_duration(duration)
    except ValueError as exc:
        raise InvalidArgument(f"duration: {exc}") from None
    if length.total_seconds() < 0:
        raise InvalidArgument("duration: must not be negative")
    try:
        return start + length
    except OverflowError:
        raise InvalidArgument(f"duration: {duration!r} ends past the year 9999") from None


def set_message(
    ctx: MasterContext,
    principal: Principal,
    message: str,
    *,
    start_time: datetime | None,
    end_time: datetime | None = None,
    duration: str | None = None,
    now: datetime | None = None,
) -> ClusterMessage:
    """Show `message` from `start_time` (none: now) until `end_time`, or for `duration` from the
    start (neither: until cleared); the message showing before ends now."""
    access.check_cluster(principal, Permission.UPDATE_MASTER_CONFIG, "set the cluster message")
    if not message.strip():
        raise InvalidArgument("message: required (the text to show)")
    if len(message) > MAX_MESSAGE_CHARS:
        raise InvalidArgument(f"message: at most {MAX_MESSAGE_CHARS} characters; got {len(message)}")
    if "\x00" in message:
        # No database text column holds NUL (PostgreSQL refuses it); nobody means one in a banner.
        raise InvalidArgument("message: must not contain NUL characters")
    now = now or utcnow()
    start = start_time or now
    end = _end_of(start, end_time, duration)
    if end is not None and end <= start:
        raise InvalidArgument("end_time: must be after the start time")
    if end is not None and end <= now:
        raise InvalidArgument("end_time: must be after the current time")
    with ctx.unit_of_work() as w:
        for earlier in reads.unended_messages(w.session, now):
            earlier.end_time = now
        row = models.ClusterMessage(
            created_by=principal.user_id or 0,
            message=message,
            start_time=start,
            end_time=end,
            created_time=now,
        )
        w.session.add(row)
        w.session.flush()
        view = ClusterMessage(row.message, row.start_time, row.end_time, row.created_time)
    return view


def clear_message(ctx: MasterContext, principal: Principal, *, now: datetime | None = None) -> None:
    """End the message now, if one is set (a cleared message is no longer shown)."""
    access.check_cluster(principal, Permission.UPDATE_MASTER_CONFIG, "clear the cluster message")
    now = now or utcnow()
    with ctx.unit_of_work() as w:
        for earlier in reads.unended_messages(w.session, now):
            earlier.end_time = now


def current_message(
    ctx: MasterContext, principal: Principal, *, now: datetime | None = None
) -> ClusterMessage | None:
    """The newest message unless it has ended (admins only, as in Determined)."""
    access.check_cluster(principal, Permission.VIEW_MASTER_CONFIG, "read the cluster message")
    with ctx.db.read() as s:
        return _view(reads.current_message(s, now or utcnow()))


def showing_message(ctx: MasterContext, *, now: datetime | None = None) -> ClusterMessage | None:
    """The message everyone sees now (GetMaster, answered without credentials)."""
    with ctx.db.read() as s:
        return _view(reads.showing_message(s, now or utcnow()))
