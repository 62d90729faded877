"""Access tokens (domain/identity/access_tokens.py) and how every token is checked (auth.py): made
for a user by the user or an admin, shown once and stored as a hash, listed and revoked by their
owner or an admin; a revoked or expired token, a logged-out session and a deactivated user are
refused on the very next call, however recently the token was checked; bad input names its field
and stores nothing. On both databases."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from services.common.principal import Principal
from services.master.domain.identity import access_tokens, auth, users
from services.master.domain.identity.access_tokens import LifespanLimits, TokenQuery, parse_lifespan
from services.master.domain.identity.auth import AuthService, hash_token
from services.master.domain.identity.users import UserChanges
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
)
from services.master.store import models
from tests.unit.master.domain.harness import Master

pytestmark = pytest.mark.on_each_database


class MovedClocks:
    """The wall clock the token checks read and the monotonic one their cache trusts by, moved on
    by a test instead of sleeping."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ahead_s = 0.0
        for module in (auth, access_tokens):
            monkeypatch.setattr(module, "utcnow", lambda: utcnow() + timedelta(seconds=self.ahead_s))

    def monotonic(self) -> float:
        return time.monotonic() + self.ahead_s

    def advance(self, seconds: float) -> None:
        self.ahead_s += seconds


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> MovedClocks:
    return MovedClocks(monkeypatch)


@pytest.fixture
def service(master: Master, clocks: MovedClocks) -> AuthService:
    return AuthService(master.db, 3600, monotonic=clocks.monotonic)


def _token_rows(master: Master) -> int:
    with master.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(models.UserSession)) or 0)


def test_a_token_acts_as_its_user_and_is_stored_only_as_its_hash(
    master: Master, service: AuthService
) -> None:
    alice = master.add_user("alice")
    assert alice.user_id is not None
    token, token_id = access_tokens.create(master.ctx, alice, alice.user_id, "72h", "nightly sync")

    assert service.authenticate_user_token(token) == Principal(user_id=alice.user_id, username="alice")
    with master.db.read() as s:
        row = s.get(models.UserSession, token_id)
        assert row is not None and row.token_type == "access" and row.token_hash == hash_token(token)
        assert token not in (row.token_hash, row.description)
        assert timedelta(hours=71) < row.expires_at - utcnow() <= timedelta(hours=72)
    (info,) = access_tokens.listing(master.ctx, alice, TokenQuery())[0]
    assert (info.id, info.user_id, info.description, info.revoked) == (
        token_id,
        alice.user_id,
        "nightly sync",
        False,
    )


def test_revocation_holds_from_the_next_call_however_recently_the_token_was_checked(
    master: Master, service: AuthService
) -> None:
    alice = master.add_user("alice")
    assert alice.user_id is not None
    token, token_id = access_tokens.create(master.ctx, alice, alice.user_id, None, "")
    for _ in range(3):  # checked, and remembered
        service.authenticate_user_token(token)

    info = access_tokens.patch(master.ctx, service, alice, token_id, None, revoke=True)

    assert info.revoked
    with pytest.raises(Unauthenticated, match=f"access token {token_id} was revoked"):
        service.authenticate_user_token(token)
    with pytest.raises(FailedPrecondition, match="revoked: it changes no more"):
        access_tokens.patch(master.ctx, service, alice, token_id, "again", revoke=True)
    # Gone from the listing of active tokens, kept for --show-inactive.
    assert access_tokens.listing(master.ctx, alice, TokenQuery())[0] == []
    (shown,) = access_tokens.listing(master.ctx, alice, TokenQuery(show_inactive=True))[0]
    assert shown.id == token_id and shown.revoked


def test_a_logout_and_a_deactivation_hold_from_the_next_call(master: Master, service: AuthService) -> None:
    service.ensure_builtin_users()
    session, _ = service.login("determined", "", is_hashed=False)
    principal = service.authenticate_user_token(session)
    assert principal.user_id is not None
    token, _ = access_tokens.create(master.ctx, principal, principal.user_id, None, "")
    service.authenticate_user_token(token)

    service.logout(session)
    with pytest.raises(Unauthenticated):
        service.authenticate_user_token(session)
    assert service.authenticate_user_token(token).user_id == principal.user_id  # a logout ends only itself

    users.patch(master.db, service, master.admin, principal.user_id, UserChanges(active=False))
    with pytest.raises(PermissionDenied, match="not active"):
        service.authenticate_user_token(token)
    users.patch(master.db, service, master.admin, principal.user_id, UserChanges(active=True))
    assert service.authenticate_user_token(token).user_id == principal.user_id  # kept while inactive


def test_logging_out_with_an_access_token_leaves_it_working(master: Master, service: AuthService) -> None:
    alice = master.add_user("alice")
    assert alice.user_id is not None
    token, _ = access_tokens.create(master.ctx, alice, alice.user_id, None, "ci")
    service.logout(token)
    assert service.authenticate_user_token(token).user_id == alice.user_id


def test_an_expired_token_is_refused_and_kept_for_its_owner(
    master: Master, service: AuthService, clocks: MovedClocks
) -> None:
    alice = master.add_user("alice")
    assert alice.user_id is not None
    token, token_id = access_tokens.create(master.ctx, alice, alice.user_id, "1s", "short")
    service.authenticate_user_token(token)
    clocks.advance(1.05)
    with pytest.raises(Unauthenticated, match=f"access token {token_id} expired"):
        service.authenticate_user_token(token)
    # A login prunes expired sessions, not expired access tokens.
    service.ensure_builtin_users()
    service.login("determined", "", is_hashed=False)
    (shown,) = access_tokens.listing(master.ctx, alice, TokenQuery(show_inactive=True))[0]
    assert shown.id == token_id
    with pytest.raises(FailedPrecondition, match="expired"):
        access_tokens.patch(master.ctx, service, alice, token_id, None, revoke=True)


def test_a_revocation_made_outside_this_process_holds_within_the_recheck(
    master: Master, service: AuthService, clocks: MovedClocks
) -> None:
    """Another master after a failover, or an operator's SQL, does not bump this process's epoch:
    the token is refused once its remembered check is older than TOKEN_RECHECK_SECONDS."""
    alice = master.add_user("alice")
    assert alice.user_id is not None
    token, token_id = access_tokens.create(master.ctx, alice, alice.user_id, None, "")
    service.authenticate_user_token(token)
    with master.db.transaction() as s:
        s.execute(
            update(models.UserSession).where(models.UserSession.id == token_id).values(revoked_at=utcnow())
        )
    clocks.advance(auth.TOKEN_RECHECK_SECONDS + 0.05)
    with pytest.raises(Unauthenticated):
        service.authenticate_user_token(token)


def test_owners_and_admins_manage_tokens_and_nobody_else(master: Master, service: AuthService) -> None:
    alice, bob = master.add_user("alice"), master.add_user("bob")
    assert alice.user_id is not None and bob.user_id is not None
    _, alice_token = access_tokens.create(master.ctx, alice, alice.user_id, None, "alice's")
    _, bob_token = access_tokens.create(master.ctx, master.admin, bob.user_id, None, "made by an admin")

    with pytest.raises(PermissionDenied, match="only its owner or an admin"):
        access_tokens.create(master.ctx, alice, bob.user_id, None, "")
    with pytest.raises(PermissionDenied, match=f"access token {bob_token} belongs to another user"):
        access_tokens.patch(master.ctx, service, alice, bob_token, None, revoke=True)
    with pytest.raises(PermissionDenied):
        access_tokens.listing(master.ctx, alice, TokenQuery(username="bob"))
    # Each sees their own; an admin sees everyone's, and revokes anyone's.
    assert [t.id for t in access_tokens.listing(master.ctx, alice, TokenQuery())[0]] == [alice_token]
    assert [t.id for t in access_tokens.listing(master.ctx, bob, TokenQuery())[0]] == [bob_token]
    everyone = access_tokens.listing(
        master.ctx, master.admin, TokenQuery(sort_by="description", descending=True)
    )
    assert [t.id for t in everyone[0]] == [bob_token, alice_token] and everyone[1].total == 2
    assert [t.id for t in access_tokens.listing(master.ctx, master.admin, TokenQuery(username="bob"))[0]] == [
        bob_token
    ]
    page, paging = access_tokens.listing(master.ctx, master.admin, TokenQuery(offset=1, limit=1))
    assert [t.id for t in page] == [bob_token] and paging.total == 2
    assert (
        access_tokens.listing(master.ctx, master.admin, TokenQuery(token_ids=(alice_token,)))[0][0].id
        == alice_token
    )
    assert access_tokens.patch(
        master.ctx, service, master.admin, alice_token, "renamed", revoke=False
    ).description == ("renamed")
    assert access_tokens.patch(master.ctx, service, master.admin, alice_token, None, revoke=True).revoked


def test_sessions_are_not_access_tokens(master: Master, service: AuthService) -> None:
    service.ensure_builtin_users()
    session, _ = service.login("admin", "", is_hashed=False)
    with master.db.read() as s:
        session_id = s.scalar(
            select(models.UserSession.id).where(models.UserSession.token_hash == hash_token(session))
        )
    assert session_id is not None
    with pytest.raises(NotFound, match=f"access token {session_id} not found"):
        access_tokens.patch(master.ctx, service, master.admin, session_id, None, revoke=True)
    assert access_tokens.listing(master.ctx, master.admin, TokenQuery(show_inactive=True))[0] == []


@pytest.mark.parametrize(
    ("lifespan", "description", "match"),
    [
        ("forever", "", "lifespan: 'forever' is not a duration"),
        ("0s", "", "lifespan: '0s' is shorter than a second"),
        ("-5h", "", "lifespan: '-5h' is not a duration"),
        ("99999999999999999999h", "", "ends after the year 9998"),
        ("1" * 100 + "h", "", "is not a duration"),
        ("1h", "x" * 256, "description: at most 255 characters"),
        ("1h", "two\nlines", "description: must not contain control characters"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(
    master: Master, lifespan: str, description: str, match: str
) -> None:
    before = _token_rows(master)
    with pytest.raises(InvalidArgument, match=match):
        access_tokens.create(master.ctx, master.admin, master.admin.user_id or 0, lifespan, description)
    assert _token_rows(master) == before


def test_tokens_for_missing_or_inactive_users_are_refused(master: Master, service: AuthService) -> None:
    with pytest.raises(NotFound, match="user 999 not found"):
        access_tokens.create(master.ctx, master.admin, 999, None, "")
    alice = master.add_user("alice")
    assert alice.user_id is not None
    users.patch(master.db, service, master.admin, alice.user_id, UserChanges(active=False))
    with pytest.raises(FailedPrecondition, match="alice is not active"):
        access_tokens.create(master.ctx, master.admin, alice.user_id, None, "")
    with pytest.raises(NotFound, match="access token 999 not found"):
        access_tokens.patch(master.ctx, service, master.admin, 999, None, revoke=True)


def test_lifespans_as_go_writes_them_within_the_masters_limits() -> None:
    unlimited, capped = LifespanLimits(30, -1), LifespanLimits(30, 90)
    assert parse_lifespan(None, unlimited) == timedelta(days=30)
    assert parse_lifespan("", capped) == timedelta(days=30)
    assert parse_lifespan("1h30m", capped) == timedelta(minutes=90)
    assert parse_lifespan("1.5h", capped) == timedelta(minutes=90)
    assert parse_lifespan("2160h", capped) == timedelta(days=90)
    assert parse_lifespan("-1", unlimited) is None
    with pytest.raises(InvalidArgument, match="without an end is not allowed here; at most 90 days"):
        parse_lifespan("-1", capped)
    with pytest.raises(InvalidArgument, match="longer than the longest allowed, 90 days"):
        parse_lifespan("2161h", capped)


def test_no_secret_the_master_hands_out_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """`det token login TOKEN` would take such a token for an option (it met one in 64)."""
    from services.master.domain.identity import agent_credentials, secret_text

    monkeypatch.setattr(secret_text.secrets, "token_urlsafe", lambda n: "-Ab" + "c" * 40)
    assert auth.new_token() == "_Ab" + "c" * 40
    assert agent_credentials.new_secret() == "_Ab" + "c" * 40
    monkeypatch.undo()
    assert not any(auth.new_token().startswith("-") for _ in range(2_000))
