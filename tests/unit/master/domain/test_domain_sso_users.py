"""Signing in through single sign-on (domain/identity/sso_users.py), on each database: the user
made on first login (a remote user, in the groups new users join), memberships synced from the
groups claim for existing groups only, the groups every user joins left alone, a missing claim
leaving memberships as they are; refused: a local account, an inactive user, an unknown user
without auto-provisioning, a name Cairn cannot take, a claim listing too many groups, each
changing nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from services.master.domain.identity import groups
from services.master.domain.identity.auth import AuthService
from services.master.domain.identity.sso_users import MAX_CLAIMED_GROUPS, SsoIdentity, sign_in
from services.master.domain.kernel.errors import InvalidArgument, NotFound, PermissionDenied
from services.master.store import models
from tests.unit.master.domain.harness import Master

pytestmark = pytest.mark.on_each_database


def _auth(master: Master) -> AuthService:
    return AuthService(master.db, 3600)


def _user_count(master: Master) -> int:
    with master.db.read() as s:
        return int(s.scalar(select(func.count()).select_from(models.User)) or 0)


def test_first_login_makes_a_remote_user_in_the_claimed_groups_that_exist(master: Master) -> None:
    groups.create(master.ctx, master.admin, "ml-team", [])
    auth = _auth(master)
    who = SsoIdentity("alice@example.com", "Alice", ("ml-team", "nowhere"))
    login = sign_in(master.ctx, auth, who, auto_provision=True)
    assert login.created and login.user.username == "alice@example.com" and login.user.display_name == "Alice"
    assert login.groups == ("everyone", "ml-team")
    assert auth.authenticate_user_token(login.token).user_id == login.user.id
    with master.db.read() as s:
        row = s.get(models.User, login.user.id)
        assert row is not None and row.remote and row.password_hash == ""
        assert s.scalar(select(models.UserGroup).where(models.UserGroup.name == "nowhere")) is None

    again = sign_in(master.ctx, auth, who, auto_provision=True)
    assert not again.created and again.user.id == login.user.id and again.token != login.token


def test_memberships_follow_the_claim_but_the_everyone_group_stays(master: Master) -> None:
    groups.create(master.ctx, master.admin, "a", [])
    groups.create(master.ctx, master.admin, "b", [])
    auth = _auth(master)
    assert sign_in(master.ctx, auth, SsoIdentity("carol", groups=("a",)), auto_provision=True).groups == (
        "a",
        "everyone",
    )
    assert sign_in(master.ctx, auth, SsoIdentity("carol", groups=("b",)), auto_provision=True).groups == (
        "b",
        "everyone",
    )
    # No claim at all: memberships as they were.
    assert sign_in(master.ctx, auth, SsoIdentity("carol"), auto_provision=True).groups == ("b", "everyone")
    # An empty claim: out of every synced group, never out of "everyone".
    assert sign_in(master.ctx, auth, SsoIdentity("carol", groups=()), auto_provision=True).groups == (
        "everyone",
    )


def test_refusals_change_nothing(master: Master) -> None:
    auth = _auth(master)
    local = master.add_user("dave@example.com")
    before = _user_count(master)
    with pytest.raises(NotFound, match="auto_provision_users"):
        sign_in(master.ctx, auth, SsoIdentity("erin@example.com"), auto_provision=False)
    with pytest.raises(PermissionDenied, match="local account"):
        sign_in(master.ctx, auth, SsoIdentity(local.username), auto_provision=True)
    for taken in ("admin", "determined"):
        with pytest.raises(InvalidArgument):
            sign_in(master.ctx, auth, SsoIdentity(taken), auto_provision=True)
    with pytest.raises(InvalidArgument, match="non-ASCII"):
        sign_in(master.ctx, auth, SsoIdentity("zoë"), auto_provision=True)
    with pytest.raises(InvalidArgument, match="at most 128"):
        sign_in(master.ctx, auth, SsoIdentity("x" * 5000), auto_provision=True)
    many = tuple(f"g{i}" for i in range(MAX_CLAIMED_GROUPS + 1))
    with pytest.raises(PermissionDenied, match="groups claim"):
        sign_in(master.ctx, auth, SsoIdentity("frank", groups=many), auto_provision=True)
    assert _user_count(master) == before


def test_an_inactive_remote_user_is_refused(master: Master) -> None:
    auth = _auth(master)
    login = sign_in(master.ctx, auth, SsoIdentity("gina"), auto_provision=True)
    with master.ctx.unit_of_work() as w:
        row = w.session.get(models.User, login.user.id)
        assert row is not None
        row.active = False
    with pytest.raises(PermissionDenied, match="not active"):
        sign_in(master.ctx, auth, SsoIdentity("gina"), auto_provision=True)
