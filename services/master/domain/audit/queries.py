"""Reading the audit trail: admins only (identity/access.py), newest first, filtered by user,
time, method, outcome and the objects a call named, a page at a time by id (`before_id`), so a
page costs the same however long the trail is and stays put while older rows are pruned."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import or_, select

from services.common.principal import Principal
from services.master.domain.audit import targets
from services.master.domain.audit.events import MAX_METHOD, MAX_USERNAME, OK
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import InvalidArgument
from services.master.store import models

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_TARGET = 512

# The outcomes a filter may name besides "ok" and "failed": gRPC's status codes, by name.
STATUS_NAMES = frozenset(
    {
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    }
)

Event = models.AuditEvent


@dataclass(frozen=True)
class AuditFilter:
    username: str = ""
    since: datetime | None = None
    until: datetime | None = None
    method: str = ""
    outcome: str = ""
    target: str = ""
    limit: int = 0
    before_id: int = 0


@dataclass(frozen=True)
class AuditPage:
    events: list[models.AuditEvent]
    # The before_id of the next (older) page; 0 when there is none.
    next_before_id: int


def _like_literal(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _checked(f: AuditFilter) -> tuple[int, str | None]:
    """The page size and the target's pattern; InvalidArgument naming the field otherwise."""
    limit = f.limit or DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit: must be between 1 and {MAX_LIMIT}, not {f.limit}")
    if f.before_id < 0:
        raise InvalidArgument(f"before_id: must not be negative, not {f.before_id}")
    if len(f.username) > MAX_USERNAME:
        raise InvalidArgument(f"username: at most {MAX_USERNAME} characters")
    if len(f.method) > MAX_METHOD:
        raise InvalidArgument(f"method: at most {MAX_METHOD} characters")
    outcome = f.outcome.strip()
    if outcome and outcome.lower() not in ("ok", "failed") and outcome.upper() not in STATUS_NAMES:
        raise InvalidArgument(
            f"outcome: {outcome[:40]!r} is neither ok, failed nor a status code name (PERMISSION_DENIED, ...)"
        )
    if f.since is not None and f.until is not None and f.since > f.until:
        raise InvalidArgument("since: must not be after until")
    pattern = None
    if f.target.strip():
        if len(f.target) > MAX_TARGET:
            raise InvalidArgument(f"target: at most {MAX_TARGET} characters")
        pattern = targets.filter_pattern(f.target)
        if pattern is None:
            raise InvalidArgument(f"target: expected key=value (experiment_id=7), not {f.target[:40]!r}")
    return limit, pattern


def list_events(ctx: MasterContext, principal: Principal, f: AuditFilter) -> AuditPage:
    # The trail is the master's record of everyone's calls: read as its logs are.
    access.check_cluster_by_person(principal, Permission.VIEW_MASTER_LOGS, "read the audit trail")
    limit, pattern = _checked(f)
    query = select(Event).order_by(Event.id.desc()).limit(limit + 1)
    if f.before_id:
        query = query.where(Event.id < f.before_id)
    if f.since is not None:
        query = query.where(Event.at >= f.since)
    if f.until is not None:
        query = query.where(Event.at < f.until)
    if f.method.strip():
        query = query.where(Event.method.ilike(f"%{_like_literal(f.method.strip())}%", escape="\\"))
    outcome = f.outcome.strip()
    if outcome.lower() == "ok":
        query = query.where(Event.outcome == OK)
    elif outcome.lower() == "failed":
        query = query.where(Event.outcome != OK)
    elif outcome:
        query = query.where(Event.outcome == outcome.upper())
    if pattern is not None:
        query = query.where(Event.targets.like(pattern, escape="\\"))
    with ctx.db.read() as session:
        if f.username:
            # The calls recorded under the name (failed logins among them), and those of the user
            # who holds the name now, made under an earlier one.
            holder = select(models.User.id).where(models.User.username == f.username).scalar_subquery()
            query = query.where(or_(Event.username == f.username, Event.user_id == holder))
        rows = list(session.scalars(query))
    more = len(rows) > limit
    rows = rows[:limit]
    return AuditPage(events=rows, next_before_id=rows[-1].id if more else 0)
