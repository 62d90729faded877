"""Access tokens (Determined's /api/v1/tokens, `det token ...`): long-lived credentials for
automation. One is created for a user (by the user, or by an admin for anyone) with a description
and a lifespan; its value is returned once and stored only as its sha256, in the table of login
sessions (`token_type` "access"), so that checking it is the same one lookup (auth.py). Its owner
and admins list it, change its description and revoke it; a revoked one keeps its row (listed with
`show_inactive`) and is refused from the next call on (auth.py's revocation epoch), as is an
expired one. Who may do each: access.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.auth import ACCESS, AuthService, hash_token, new_token
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import FailedPrecondition, InvalidArgument, NotFound
from services.master.domain.kernel.go_duration import go_duration_seconds
from services.master.domain.kernel.paging import Page, page_of
from services.master.store import models

# The expiry stored for a token without an end (a lifespan of "-1", where the master allows it).
NO_END = datetime(9999, 1, 1, tzinfo=UTC)
# The column's width; longer is refused rather than cut.
MAX_DESCRIPTION = 255
# A lifespan is a short text ("720h", "1h30m"); anything longer is not one.
MAX_LIFESPAN_TEXT = 64
# Control characters (tabs, line breaks) would break the tables descriptions are printed in.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

SORT_COLUMNS = {
    "id": models.UserSession.id,
    "user_id": models.UserSession.user_id,
    "expiry": models.UserSession.expires_at,
    "created_at": models.UserSession.created_at,
    "token_type": models.UserSession.token_type,
    "revoked": models.UserSession.revoked_at,
    "description": models.UserSession.description,
}


@dataclass(frozen=True)
class LifespanLimits:
    """The master's --token-default-lifespan-days and --token-max-lifespan-days (-1: no limit)."""

    default_days: int = 30
    max_days: int = -1


@dataclass(frozen=True)
class TokenInfo:
    id: int
    user_id: int
    created_at: datetime
    expiry: datetime
    revoked: bool
    description: str


@dataclass(frozen=True)
class TokenQuery:
    token_ids: tuple[int, ...] = ()
    username: str = ""
    show_inactive: bool = False
    sort_by: str = "id"
    descending: bool = False
    offset: int = 0
    limit: int = 0


def limits_of(ctx: MasterContext) -> LifespanLimits:
    return LifespanLimits(ctx.settings.token_default_lifespan_days, ctx.settings.token_max_lifespan_days)


def parse_lifespan(text: str | None, limits: LifespanLimits) -> timedelta | None:
    """The lifespan a request asks for, as Go writes durations ("72h", "1h30m", "90s"); None: no
    end ("-1", allowed only without a maximum). Unset or empty: the default. Bounded before any
    date is computed from it, so no lifespan overflows one."""
    if text is None or text == "":
        return timedelta(days=limits.default_days)
    text = text.strip()
    if text == "-1":
        if limits.max_days != -1:
            raise InvalidArgument(
                f"lifespan: a token without an end is not allowed here; at most {limits.max_days} days"
            )
        return None
    not_one = InvalidArgument(
        f"lifespan: {text[:MAX_LIFESPAN_TEXT]!r} is not a duration; write it as Go does "
        '("720h", "1h30m"), or "-1" for no end'
    )
    if len(text) > MAX_LIFESPAN_TEXT or text[:1] in "+-":  # no sign: a lifespan runs forward
        raise not_one
    try:
        seconds = go_duration_seconds(text)
    except ValueError:
        raise not_one from None
    longest_days = limits.max_days if limits.max_days != -1 else None
    if seconds < 1:
        raise InvalidArgument(f"lifespan: {text!r} is shorter than a second")
    if longest_days is not None and seconds > longest_days * 86_400:
        raise InvalidArgument(f"lifespan: {text!r} is longer than the longest allowed, {longest_days} days")
    if seconds >= (NO_END - datetime(2000, 1, 1, tzinfo=UTC)).total_seconds():
        raise InvalidArgument(f'lifespan: {text!r} ends after the year 9998; use "-1" for no end')
    return timedelta(seconds=seconds)


def _check_description(description: str) -> str:
    if len(description) > MAX_DESCRIPTION:
        raise InvalidArgument(f"description: at most {MAX_DESCRIPTION} characters, not {len(description)}")
    if _CONTROL.search(description):
        raise InvalidArgument("description: must not contain control characters (tabs, line breaks)")
    return description


def _info(row: models.UserSession) -> TokenInfo:
    return TokenInfo(
        id=row.id,
        user_id=row.user_id,
        created_at=row.created_at,
        expiry=row.expires_at,
        revoked=row.revoked_at is not None,
        description=row.description,
    )


def create(
    ctx: MasterContext, principal: Principal, user_id: int, lifespan: str | None, description: str
) -> tuple[str, int]:
    """A new access token for `user_id`: its value (shown this once) and its id."""
    access.check_may_manage_tokens(principal, user_id, f"user {user_id}", "create access tokens for")
    span = parse_lifespan(lifespan, limits_of(ctx))
    description = _check_description(description)
    token = new_token()
    with ctx.unit_of_work() as w:
        user = w.session.get(models.User, user_id)
        if user is None:
            raise NotFound(f"user {user_id} not found")
        if not user.active:
            raise FailedPrecondition(f"user {user.username} is not active: no token can act as them")
        now = utcnow()
        row = models.UserSession(
            user_id=user_id,
            token_hash=hash_token(token),
            created_at=now,
            expires_at=NO_END if span is None else now + span,
            token_type=ACCESS,
            description=description,
        )
        w.session.add(row)
        w.session.flush()
        token_id = row.id
    return token, token_id


def listing(ctx: MasterContext, principal: Principal, query: TokenQuery) -> tuple[list[TokenInfo], Page]:
    """The access tokens `principal` may see (their own; everyone's for an admin), as asked."""
    q = select(models.UserSession).where(models.UserSession.token_type == ACCESS)
    with ctx.db.read() as s:
        if query.username:
            owner = s.scalar(select(models.User.id).where(models.User.username == query.username))
            if owner is None:
                raise NotFound(f"username: user {query.username!r} not found")
            access.check_may_manage_tokens(principal, owner, f"user {query.username}", "list the tokens of")
            q = q.where(models.UserSession.user_id == owner)
        if not access.sees_every_token(principal):
            q = q.where(models.UserSession.user_id == principal.user_id)
        if not query.show_inactive:
            q = q.where(models.UserSession.revoked_at.is_(None), models.UserSession.expires_at > utcnow())
        if query.token_ids:
            q = q.where(models.UserSession.id.in_(sorted(set(query.token_ids))))
        column = SORT_COLUMNS.get(query.sort_by, models.UserSession.id)
        q = q.order_by(column.desc() if query.descending else column.asc(), models.UserSession.id)
        rows = [_info(row) for row in s.scalars(q)]
    page = page_of(len(rows), query.offset, query.limit)
    return rows[page.start : page.end], page


def patch(
    ctx: MasterContext,
    auth: AuthService,
    principal: Principal,
    token_id: int,
    description: str | None,
    revoke: bool,
) -> TokenInfo:
    """Change an access token's description and/or revoke it; a revoked or expired token changes
    no more. A revocation holds from the next call on, in every process of the master."""
    if description is not None:
        description = _check_description(description)
    with ctx.unit_of_work() as w:
        row = w.session.get(models.UserSession, token_id)
        if row is None or row.token_type != ACCESS:
            raise NotFound(f"access token {token_id} not found")
        access.check_may_manage_tokens(principal, row.user_id, f"access token {token_id}", "change")
        now = utcnow()
        if row.revoked_at is not None:
            raise FailedPrecondition(f"access token {token_id} is revoked: it changes no more")
        if row.expires_at <= now:
            raise FailedPrecondition(f"access token {token_id} has expired: it changes no more")
        if description is not None:
            row.description = description
        if revoke:
            row.revoked_at = now
            w.later(auth.credentials_changed)
        info = _info(row)
    return info
