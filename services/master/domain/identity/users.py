"""Managing users (Determined's user API): create, list, read, change, set a password.

Who may do what, as in Determined without RBAC: admins create users, change other users'
passwords and usernames, (de)activate users and grant or take the admin flag; every user may
change their own password and display name. A deactivated user's sessions end at once (their rows
are deleted and the token cache forgets them), their access tokens are refused while they are
inactive, and they cannot log in. Passwords are stored as at
login (auth.py): the client-side salted hash, then salted PBKDF2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import delete, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cairn.client.password import salt_and_hash
from services.common.principal import Principal
from services.master.domain.identity import access, agent_users, default_groups
from services.master.domain.identity.auth import (
    SESSION,
    AuthService,
    UserInfo,
    hash_password,
    salted_password,
    user_info,
)
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.errors import AlreadyExists, InvalidArgument, NotFound
from services.master.domain.kernel.paging import Page, page_of
from services.master.store import models
from services.master.store.db import Database

# Determined's rule for usernames and display names: surrounding spaces trimmed, then printable
# ASCII only (no hidden whitespace, no lookalike letters), a username at least 2 characters long.
# Cairn also refuses tabs and line breaks (a name is printed in tables and log lines) and bounds a
# username at 128 characters, which fits the column (255) and any real login name.
PRINTABLE_ASCII = re.compile(r"[ -~]*")
MIN_USERNAME = 2
MAX_USERNAME = 128
# Names Determined keeps: only an admin may be called "admin", and "determined" is the default
# admin's alone.
RESERVED_FOR_ADMINS = "admin"
DEFAULT_ADMIN = "determined"
# The column's width; longer is refused rather than cut.
MAX_DISPLAY_NAME = 255
# The client-side hash is 128 hex characters; a plain password past this is not a password.
MAX_PASSWORD = 1024
EMPTY_PASSWORD = salt_and_hash("")


@dataclass(frozen=True)
class UserChanges:
    username: str | None = None
    admin: bool | None = None
    active: bool | None = None
    display_name: str | None = None
    password: str | None = None
    is_hashed: bool = False
    remote: bool | None = None
    # Admins only (Determined's link-with-agent-user); None: not asked.
    agent_user_group: agent_users.AgentUserGroupRequest | None = None


@dataclass(frozen=True)
class UserQuery:
    name: str = ""
    active: bool | None = None
    admin: bool | None = None
    sort_by: str = "id"
    descending: bool = False
    offset: int = 0
    limit: int = 0


SORT_COLUMNS = {
    "id": models.User.id,
    "display_name": models.User.display_name,
    "username": models.User.username,
    "admin": models.User.admin,
    "active": models.User.active,
    "modified_at": models.User.modified_at,
    "name": func.coalesce(func.nullif(models.User.display_name, ""), models.User.username),
    "last_auth_at": models.User.last_auth_at,
}


def _require_admin(principal: Principal, what: str) -> None:
    access.check_cluster(principal, Permission.ADMINISTRATE_USER, what)


def _clean_name(name: str, field: str) -> str:
    clean = name.strip()
    if not PRINTABLE_ASCII.fullmatch(clean):
        raise InvalidArgument(f"{field}: Display name and username cannot contain non-ASCII characters.")
    return clean


def _check_username(username: str, field: str, *, current: str = "", admin: bool = False) -> str:
    """`username` as stored, for a user now named `current` ("" for a new one) whose admin flag
    is `admin` after the change."""
    clean = _clean_name(username, field)
    if len(clean) < MIN_USERNAME:
        raise InvalidArgument(f"{field}: Display name or username value has minimum length.")
    if len(clean) > MAX_USERNAME:
        raise InvalidArgument(f"{field}: at most {MAX_USERNAME} characters, not {len(clean)}")
    if clean.lower() == RESERVED_FOR_ADMINS and not admin:
        raise InvalidArgument(f"{field}: Non-admin user cannot be renamed 'admin'")
    if clean.lower() == DEFAULT_ADMIN and current != DEFAULT_ADMIN:
        raise InvalidArgument(f"{field}: User cannot be renamed 'determined'")
    return clean


def check_sso_username(username: str) -> str:
    """A username taken from a provider's claim (sso_users.py), under the rules every username
    keeps; "admin" and "determined" are never a remote user's."""
    return _check_username(username[: MAX_USERNAME + 1], "the provider's username claim")


def _check_display_name(display_name: str, field: str) -> str:
    if len(display_name) > MAX_DISPLAY_NAME:
        raise InvalidArgument(f"{field}: at most {MAX_DISPLAY_NAME} characters, not {len(display_name)}")
    return _clean_name(display_name, field)


def _password_hash(password: str, is_hashed: bool, field: str) -> str:
    if len(password) > MAX_PASSWORD:
        raise InvalidArgument(f"{field}: at most {MAX_PASSWORD} characters")
    salted = salted_password(password, is_hashed)
    if salted == EMPTY_PASSWORD:
        raise InvalidArgument(f"{field}: must not be empty")
    return hash_password(salted)


def _refuse_remote(remote: bool | None, field: str) -> None:
    if remote:
        raise InvalidArgument(
            f"{field}: remote users sign in through single sign-on, which this master does not have "
            "(the config file's oidc block)"
        )


def create(
    db: Database,
    principal: Principal,
    user: UserChanges,
    password: str,
    is_hashed: bool,
    *,
    allow_root_agent_user: bool = False,
    allow_remote: bool = False,
) -> UserInfo:
    """`allow_remote`: the master has single sign-on, so a remote user (no password, signs in
    through the provider: sso_users.py) may be created ahead of its first login."""
    _require_admin(principal, "create users")
    # As Determined: a new user is its own "current" name, so only "determined" itself passes the
    # reserved-name check (and then meets the existing default admin).
    username = _check_username(
        user.username or "", "user.username", current=(user.username or "").strip(), admin=bool(user.admin)
    )
    link = (
        agent_users.checked(user.agent_user_group, "user.agentUserGroup", allow_root=allow_root_agent_user)
        if user.agent_user_group is not None
        else None
    )
    display_name = _check_display_name(user.display_name or "", "user.displayName")
    remote = bool(user.remote)
    if remote and not allow_remote:
        _refuse_remote(remote, "user.remote")
    if remote and password and salted_password(password, is_hashed) != EMPTY_PASSWORD:
        raise InvalidArgument("password: a remote user has none (it signs in through single sign-on)")
    password_hash = "" if remote else _password_hash(password, is_hashed, "password")
    now = utcnow()
    try:
        with db.transaction() as s:
            if s.scalar(select(models.User.id).where(models.User.username == username)) is not None:
                raise AlreadyExists(f"user.username: user {username!r} already exists")
            row = models.User(
                username=username,
                password_hash=password_hash,
                admin=bool(user.admin),
                active=True if user.active is None else user.active,
                display_name=display_name,
                created_at=now,
                modified_at=now,
                remote=remote,
            )
            agent_users.store(row, link)
            s.add(row)
            s.flush()
            default_groups.join(s, row.id)
            return user_info(row)
    except IntegrityError:
        # Another request created the same name between our check and our insert.
        raise AlreadyExists(f"user.username: user {username!r} already exists") from None


def get(db: Database, user_id: int) -> UserInfo:
    with db.read() as s:
        row = s.get(models.User, user_id)
        if row is None:
            raise NotFound(f"user {user_id} not found")
        return user_info(row)


def get_many(db: Database, user_ids: list[int]) -> list[UserInfo]:
    """The users of these ids that exist, in the order asked."""
    with db.read() as s:
        found = {
            u.id: user_info(u) for u in s.scalars(select(models.User).where(models.User.id.in_(user_ids)))
        }
    return [found[i] for i in user_ids if i in found]


def get_by_username(db: Database, username: str) -> UserInfo:
    with db.read() as s:
        row = s.scalar(select(models.User).where(models.User.username == username))
        if row is None:
            raise NotFound(f"user {username!r} not found")
        return user_info(row)


def listing(db: Database, query: UserQuery) -> tuple[list[UserInfo], Page]:
    q = select(models.User)
    if query.name:
        pattern = f"%{query.name}%"
        q = q.where(or_(models.User.username.like(pattern), models.User.display_name.like(pattern)))
    if query.active is not None:
        q = q.where(models.User.active == query.active)
    if query.admin is not None:
        q = q.where(models.User.admin == query.admin)
    column = SORT_COLUMNS[query.sort_by]
    q = q.order_by(column.desc() if query.descending else column.asc(), models.User.id)
    with db.read() as s:
        rows = [user_info(u) for u in s.scalars(q)]
    page = page_of(len(rows), query.offset, query.limit)
    return rows[page.start : page.end], page


def patch(
    db: Database,
    auth: AuthService,
    principal: Principal,
    user_id: int,
    changes: UserChanges,
    *,
    allow_root_agent_user: bool = False,
) -> UserInfo:
    """Change a user. `allow_root_agent_user`: the master's policy on links to uid 0."""
    own = principal.user_id == user_id
    if changes.username is not None or changes.admin is not None or changes.active is not None:
        _require_admin(principal, "change a user's username, admin flag or active state")
    link = None
    if changes.agent_user_group is not None:
        _require_admin(principal, "link a user with an agent user")
        link = agent_users.checked(
            changes.agent_user_group, "user.agentUserGroup", allow_root=allow_root_agent_user
        )
    if (changes.password is not None or changes.display_name is not None) and not own:
        _require_admin(principal, "change another user's password or display name")
    _refuse_remote(changes.remote, "user.remote")
    if own and (changes.active is False or changes.admin is False):
        # An admin locking themselves out could leave the cluster with no admin at all.
        raise InvalidArgument("user: an admin may not deactivate themselves or drop their own admin flag")
    password_hash = (
        _password_hash(changes.password, changes.is_hashed, "user.password")
        if changes.password is not None
        else None
    )
    display_name = (
        _check_display_name(changes.display_name, "user.displayName")
        if changes.display_name is not None
        else None
    )
    username = None
    try:
        with db.transaction() as s:
            row = s.get(models.User, user_id)
            if row is None:
                raise NotFound(f"user {user_id} not found")
            if changes.username is not None and changes.username != row.username:
                # Who the user is decides the names open to them: checked against the stored row.
                admin = row.admin if changes.admin is None else changes.admin
                username = _check_username(
                    changes.username, "user.username", current=row.username, admin=admin
                )
            if username is not None and username != row.username:
                taken = s.scalar(select(models.User.id).where(models.User.username == username))
                if taken is not None:
                    raise AlreadyExists(f"user.username: user {username!r} already exists")
                row.username = username
            if changes.admin is not None:
                row.admin = changes.admin
            if changes.active is not None:
                row.active = changes.active
                if not changes.active:
                    # A deactivated user's sessions end now, not when they expire.
                    s.execute(
                        delete(models.UserSession).where(
                            models.UserSession.user_id == user_id, models.UserSession.token_type == SESSION
                        )
                    )
            if display_name is not None and display_name != row.display_name:
                if display_name:
                    _refuse_similar_display_name(s, user_id, display_name)
                row.display_name = display_name
            if password_hash is not None:
                row.password_hash = password_hash
            if changes.agent_user_group is not None:
                agent_users.store(row, link)
            row.modified_at = utcnow()
            info = user_info(row)
    except IntegrityError:
        raise AlreadyExists(f"user.username: user {username!r} already exists") from None
    auth.forget_user(user_id)
    return info


def _refuse_similar_display_name(s: Session, user_id: int, display_name: str) -> None:
    """Determined's rule: a display name may not read as another user's username or display name
    (case aside), so no one can pass for someone else in a listing."""
    lowered = display_name.lower()
    similar = s.scalar(
        select(models.User.id)
        .where(models.User.id != user_id)
        .where(
            or_(func.lower(models.User.username) == lowered, func.lower(models.User.display_name) == lowered)
        )
        .limit(1)
    )
    if similar is not None:
        raise InvalidArgument(
            f"user.displayName: can not change display name to {display_name} "
            "found a similar username or display name"
        )


def set_password(
    db: Database, auth: AuthService, principal: Principal, user_id: int, password: str
) -> UserInfo:
    return patch(db, auth, principal, user_id, UserChanges(password=password, is_hashed=False))
