"""Managing users (domain/identity/users.py): who may create, change and (de)activate; a deactivated user's
sessions end at once; bad names and passwords are refused naming the field and change nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.client.password import salt_and_hash
from services.common.principal import Principal
from services.master.domain.identity import users
from services.master.domain.identity.auth import AuthService
from services.master.domain.identity.users import UserChanges, UserQuery
from services.master.domain.kernel.errors import (
    AlreadyExists,
    InvalidArgument,
    PermissionDenied,
    Unauthenticated,
)
from services.master.store.db import Database


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'users.db'}")
    database.migrate()
    yield database
    database.dispose()


@pytest.fixture
def auth(db: Database) -> AuthService:
    service = AuthService(db, 3600)
    service.ensure_builtin_users()
    return service


def _principal(auth: AuthService, username: str, password: str) -> tuple[str, Principal]:
    token, _ = auth.login(username, password, is_hashed=False)
    return token, auth.authenticate_user_token(token)


def test_an_admin_creates_users_and_a_user_changes_their_own_password(
    db: Database, auth: AuthService
) -> None:
    _, admin = _principal(auth, "admin", "")
    alice = users.create(
        db, admin, UserChanges(username="alice", display_name="Alice"), salt_and_hash("Pw-alice1"), True
    )
    assert (alice.username, alice.admin, alice.active) == ("alice", False, True)
    users.create(db, admin, UserChanges(username="root2", admin=True), "Pw-root2x", False)
    rows, page = users.listing(db, UserQuery(admin=True))
    assert [u.username for u in rows] == ["admin", "root2"] and page.total == 2

    _, as_alice = _principal(auth, "alice", "Pw-alice1")
    users.set_password(db, auth, as_alice, alice.id, "Pw-alice2")
    with pytest.raises(Unauthenticated):
        auth.login("alice", "Pw-alice1", is_hashed=False)
    assert auth.login("alice", "Pw-alice2", is_hashed=False)[1].username == "alice"


def test_a_user_who_is_not_admin_is_refused(db: Database, auth: AuthService) -> None:
    _, admin = _principal(auth, "admin", "")
    bob = users.create(db, admin, UserChanges(username="bob"), "Pw-bob123", False)
    _, as_bob = _principal(auth, "bob", "Pw-bob123")
    with pytest.raises(PermissionDenied, match="only an admin may create users"):
        users.create(db, as_bob, UserChanges(username="eve"), "Pw-eve123", False)
    with pytest.raises(PermissionDenied, match="admin flag"):
        users.patch(db, auth, as_bob, bob.id, UserChanges(admin=True))
    with pytest.raises(PermissionDenied, match="another user's password"):
        users.set_password(db, auth, as_bob, admin.user_id or 0, "Pw-taken1")
    assert users.get_by_username(db, "bob").admin is False
    assert [u.username for u in users.listing(db, UserQuery(name="eve"))[0]] == []


def test_deactivation_ends_sessions_and_logins(db: Database, auth: AuthService) -> None:
    _, admin = _principal(auth, "admin", "")
    carol = users.create(db, admin, UserChanges(username="carol"), "Pw-carol1", False)
    token, _ = _principal(auth, "carol", "Pw-carol1")  # authenticated: now in the token cache
    users.patch(db, auth, admin, carol.id, UserChanges(active=False))
    with pytest.raises(Unauthenticated, match="unknown or revoked"):
        auth.authenticate_user_token(token)
    with pytest.raises(PermissionDenied, match="user is not active"):
        auth.login("carol", "Pw-carol1", is_hashed=False)
    users.patch(db, auth, admin, carol.id, UserChanges(active=True))
    assert auth.login("carol", "Pw-carol1", is_hashed=False)[1].active


def test_bad_input_names_the_field_and_changes_nothing(db: Database, auth: AuthService) -> None:
    _, admin = _principal(auth, "admin", "")
    # Determined's rule: printable ASCII, at least 2 characters once trimmed; "admin" for admins only.
    for name in ("", " a ", "x\x1b[31m", "é" * 3, "a" * 200, "tab\there", "Admin", "DETERMINED"):
        with pytest.raises(InvalidArgument, match=r"user\.username"):
            users.create(db, admin, UserChanges(username=name), "Pw-12345", False)
    with pytest.raises(InvalidArgument, match="password: must not be empty"):
        users.create(db, admin, UserChanges(username="dave"), salt_and_hash(""), True)
    with pytest.raises(InvalidArgument, match=r"user\.displayName: Display name and username cannot"):
        users.create(db, admin, UserChanges(username="dave", display_name="\u202eevil"), "Pw-12345", False)
    with pytest.raises(InvalidArgument, match=r"user\.remote"):
        users.create(db, admin, UserChanges(username="dave", remote=True), "Pw-12345", False)
    with pytest.raises(AlreadyExists, match=r"user\.username: user 'determined' already exists"):
        users.create(db, admin, UserChanges(username="determined"), "Pw-12345", False)
    with pytest.raises(InvalidArgument, match="may not deactivate themselves"):
        users.patch(db, auth, admin, admin.user_id or 0, UserChanges(active=False))
    assert [u.username for u in users.listing(db, UserQuery())[0]] == ["admin", "determined"]


def test_names_determined_accepts_are_accepted_trimmed(db: Database, auth: AuthService) -> None:
    _, admin = _principal(auth, "admin", "")
    for name in ("a b", "-lead", "user!#$%&'()*+,/:;<=>?[]^`{|}~", "  padded  ", "ab"):
        created = users.create(db, admin, UserChanges(username=name), "Pw-12345", False)
        assert created.username == name.strip()
    # "admin", in any case, is open to an admin only.
    assert users.create(db, admin, UserChanges(username="Admin", admin=True), "Pw-12345", False).admin


def test_a_display_name_may_not_pass_for_another_user(db: Database, auth: AuthService) -> None:
    _, admin = _principal(auth, "admin", "")
    erin = users.create(db, admin, UserChanges(username="erin"), "Pw-12345", False)
    frank = users.create(db, admin, UserChanges(username="frank", display_name="Frank F."), "Pw-12345", False)
    for taken in ("ADMIN", "Determined", "frank f."):
        with pytest.raises(InvalidArgument, match="found a similar username or display name"):
            users.patch(db, auth, admin, erin.id, UserChanges(display_name=taken))

    def rename(user_id: int, display_name: str) -> str:
        return users.patch(db, auth, admin, user_id, UserChanges(display_name=display_name)).display_name

    assert rename(erin.id, " Erin E. ") == "Erin E."
    # Keeping one's own display name, or clearing it, is no collision.
    assert rename(frank.id, "Frank F.") == "Frank F."
    assert rename(frank.id, "") == ""
