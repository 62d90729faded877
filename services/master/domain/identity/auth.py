"""Users, passwords and the tokens callers present.

Passwords: Determined-compatible clients send sha512(salt + password) ("is_hashed"); plain ones are
salted the same way here, so both forms converge on one value, which is stored only as a PBKDF2
hash. Tokens: random, returned once, stored only as sha256; a login's session token lasts the
master's session lifetime (--session-ttl), an access token (access_tokens.py) its own lifespan
until it is revoked. Failed logins are limited per user and per client address (login_limiter.py).

Checking a token: the database says whether it is valid (one lookup by its hash, through a unique
index, joined with its user); the answer is then trusted from memory for at most
TOKEN_RECHECK_SECONDS, and only while no credential has ended since. Every change that ends one
(a logout, a revoked token, a user deactivated or changed) bumps the revocation epoch after its
commit, which empties the memory: the very next call is checked against the database again. Every
token of the public API is checked in this process (the HTTP port's worker processes relay their
calls here), so the epoch is enough; the recheck bounds what a change made outside this process
(another master after a failover, an operator's SQL) can let through to half a second.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import bindparam, delete, select
from sqlalchemy.orm import Session

from cairn.client.password import salt_and_hash
from services.common.principal import Principal
from services.master.domain.identity import agent_users, allocation_access, default_groups
from services.master.domain.identity.agent_users import AgentUserGroup
from services.master.domain.identity.login_limiter import LoginLimiter, LoginLimits
from services.master.domain.identity.secret_text import new_secret_text
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.errors import InvalidArgument, PermissionDenied, Unauthenticated
from services.master.store import models
from services.master.store.db import Database

PBKDF2_ITERATIONS = 120_000
# Accounts every fresh cluster has, as in Determined (both start with an empty password).
BUILTIN_USERS = (("admin", True), ("determined", False))
# A validated token is trusted for this long without another database read, while no credential
# has ended meanwhile (the revocation epoch, above).
TOKEN_RECHECK_SECONDS = 0.5
# Remembered tokens, at most: past it the memory starts over (each token costs one lookup again).
MAX_REMEMBERED_TOKENS = 10_000
# The kinds of token a user_sessions row holds.
SESSION = "session"
ACCESS = "access"


# One lookup by the token's hash (unique index), joined with its user; built once, not per call.
_TOKEN_CHECK = (
    select(
        models.UserSession.id,
        models.UserSession.token_type,
        models.UserSession.expires_at,
        models.UserSession.revoked_at,
        models.User.id,
        models.User.username,
        models.User.admin,
        models.User.active,
    )
    .join(models.User, models.User.id == models.UserSession.user_id)
    .where(models.UserSession.token_hash == bindparam("token_hash"))
)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return new_secret_text()


def hash_password(salted: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", salted.encode(), salt, PBKDF2_ITERATIONS)
    salt_b64, digest_b64 = base64.b64encode(salt).decode(), base64.b64encode(digest).decode()
    return f"pbkdf2_sha256${PBKDF2_ITERATIONS}${salt_b64}${digest_b64}"


def salted_password(password: str, is_hashed: bool) -> str:
    """The client-side salted hash of a password, whichever form the client sent."""
    # Determined's clients send an empty password as is, even with is_hashed set.
    return password if is_hashed and password else salt_and_hash(password)


def has_empty_password(user: models.User) -> bool:
    return verify_password(salt_and_hash(""), user.password_hash)


def format_duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def verify_password(salted: str, stored: str) -> bool:
    try:
        scheme, iterations, salt_b64, digest_b64 = stored.split("$")
    except ValueError:
        return False
    if scheme != "pbkdf2_sha256":
        return False
    digest = hashlib.pbkdf2_hmac("sha256", salted.encode(), base64.b64decode(salt_b64), int(iterations))
    return hmac.compare_digest(digest, base64.b64decode(digest_b64))


@dataclass(frozen=True)
class UserInfo:
    id: int
    username: str
    admin: bool
    active: bool
    display_name: str
    modified_at: str
    last_auth_at: str
    # The Linux account the user's tasks run as; None: the cluster's task user.
    agent_user_group: AgentUserGroup | None = None
    # Signs in through single sign-on only (sso_users.py).
    remote: bool = False


def user_info(user: models.User) -> UserInfo:
    return UserInfo(
        id=user.id,
        username=user.username,
        admin=user.admin,
        active=user.active,
        display_name=user.display_name,
        modified_at=user.modified_at.isoformat(),
        last_auth_at=user.last_auth_at.isoformat() if user.last_auth_at else "",
        agent_user_group=agent_users.of_row(user),
        remote=bool(user.remote),
    )


class AuthService:
    def __init__(
        self,
        db: Database,
        session_ttl_seconds: int,
        limiter: LoginLimiter | None = None,
        initial_password: str = "",
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        # What "trusted until" in the cache is measured by (a test moves it instead of sleeping).
        self._monotonic = monotonic
        self._ttl = timedelta(seconds=session_ttl_seconds)
        self._limiter = limiter or LoginLimiter(LoginLimits())
        self._initial_password = initial_password
        # Token hash -> (principal, the epoch it was checked in, trusted until (monotonic)).
        self._cache: dict[str, tuple[Principal, int, float]] = {}
        self._cache_lock = threading.Lock()
        self._epoch = 0

    def ensure_builtin_users(self) -> None:
        """Create the built-in accounts; with an initial password, give it to those still without one
        (as Determined's `initial_user_password` does for new clusters)."""
        initial = ""  # hashed once, and only when an account needs it (a hash takes ~30 ms)
        with self._db.transaction() as s:
            existing = {u.username: u for u in s.scalars(select(models.User))}
            now = utcnow()
            for username, admin in BUILTIN_USERS:
                user = existing.get(username)
                needs_password = user is None or (self._initial_password and has_empty_password(user))
                if needs_password and not initial:
                    initial = hash_password(salt_and_hash(self._initial_password))
                if user is None:
                    created = models.User(
                        username=username,
                        password_hash=initial,
                        admin=admin,
                        active=True,
                        display_name="",
                        created_at=now,
                        modified_at=now,
                    )
                    s.add(created)
                    s.flush()
                    default_groups.join(s, created.id)
                elif needs_password:
                    user.password_hash = initial
                    user.modified_at = now

    def builtin_users_without_password(self) -> list[str]:
        """Active built-in accounts anyone can log in to (empty password)."""
        names = [name for name, _ in BUILTIN_USERS]
        with self._db.read() as s:
            users = s.scalars(select(models.User).where(models.User.username.in_(names)))
            return sorted(u.username for u in users if u.active and has_empty_password(u))

    def login(
        self, username: str, password: str, is_hashed: bool, client_address: str = ""
    ) -> tuple[str, UserInfo]:
        if not username:
            raise InvalidArgument("username: required")
        # Refused before the password is looked at: guessing during the pause learns nothing.
        self._limiter.check(username, client_address)
        salted = salted_password(password, is_hashed)
        with self._db.transaction() as s:
            user = s.scalar(select(models.User).where(models.User.username == username))
            # One message for "no such user" and "wrong password": do not reveal which.
            if user is None or not verify_password(salted, user.password_hash):
                self._limiter.failed(username, client_address)
                raise Unauthenticated("invalid credentials")
            if not user.active:
                raise PermissionDenied("user is not active")
            self._limiter.succeeded(username)
            return self.open_session(s, user), user_info(user)

    def open_session(self, s: Session, user: models.User) -> str:
        """A new login session for `user`, in the caller's transaction (a password login, single
        sign-on: sso_users.py); its token, returned once."""
        token = new_token()
        now = utcnow()
        s.add(
            models.UserSession(
                user_id=user.id,
                token_hash=hash_token(token),
                created_at=now,
                expires_at=now + self._ttl,
                token_type=SESSION,
            )
        )
        user.last_auth_at = now
        # Expired sessions are pruned here, where they would otherwise only grow. (Access tokens
        # stay: their owners list them, expired ones too.)
        s.execute(
            delete(models.UserSession).where(
                models.UserSession.expires_at < now, models.UserSession.token_type == SESSION
            )
        )
        return token

    def logout(self, token: str) -> None:
        """End a login's session. An access token is not ended by a client that logs out with it
        (other automation may hold it): it is revoked (access_tokens.patch) or expires."""
        token_hash = hash_token(token)
        with self._db.transaction() as s:
            s.execute(
                delete(models.UserSession).where(
                    models.UserSession.token_hash == token_hash, models.UserSession.token_type == SESSION
                )
            )
        self.credentials_changed()

    def credentials_changed(self) -> None:
        """A credential ended or a user changed (committed): from the next call on, every token is
        checked against the database again."""
        with self._cache_lock:
            self._epoch += 1
            self._cache.clear()

    def forget_user(self, user_id: int) -> None:
        """A change to the user (deactivated, admin flag) holds from the next call."""
        del user_id  # every remembered token goes: a change to a user is rare
        self.credentials_changed()

    def user(self, user_id: int) -> UserInfo:
        with self._db.read() as s:
            user = s.get(models.User, user_id)
            if user is None:
                raise Unauthenticated("user no longer exists")
            return user_info(user)

    def authenticate_user_token(self, token: str) -> Principal:
        """The user a session or access token stands for; Unauthenticated for an unknown, revoked
        or expired token, PermissionDenied for a deactivated user."""
        token_hash = hash_token(token)
        now_mono = self._monotonic()
        with self._cache_lock:
            epoch = self._epoch
            hit = self._cache.get(token_hash)
        if hit is not None and hit[1] == epoch and hit[2] > now_mono:
            return hit[0]
        principal, left_s = self._check_token(token_hash)
        with self._cache_lock:
            # Remembered only if nothing ended meanwhile: a check that raced a revocation (read
            # the row before its commit) must not outlive it.
            if self._epoch == epoch:
                if len(self._cache) >= MAX_REMEMBERED_TOKENS:
                    self._cache.clear()
                # Never trusted past the token's own end.
                self._cache[token_hash] = (principal, epoch, now_mono + min(TOKEN_RECHECK_SECONDS, left_s))
        return principal

    def _check_token(self, token_hash: str) -> tuple[Principal, float]:
        """The token's principal and the seconds it has left, from the database."""
        with self._db.read() as s:
            row = s.execute(_TOKEN_CHECK, {"token_hash": token_hash}).first()
        if row is None:
            raise Unauthenticated("invalid credentials: unknown or revoked token")
        token_id, token_type, expires_at, revoked_at, user_id, username, admin, active = row
        if revoked_at is not None:
            raise Unauthenticated(f"invalid credentials: access token {token_id} was revoked")
        left_s = (expires_at - utcnow()).total_seconds()
        if left_s <= 0:
            if token_type == ACCESS:
                raise Unauthenticated(
                    f"access token {token_id} expired at {expires_at.isoformat()}: create a new one "
                    "(`det token create`)"
                )
            raise Unauthenticated(
                f"session expired (sessions last {format_duration(self._ttl)}): log in again"
            )
        if not active:
            raise PermissionDenied("user is not active")
        return Principal(user_id=user_id, username=username, admin=admin), left_s

    def authenticate_allocation_token(self, token: str) -> Principal:
        """Trial code's token, refused once its allocation has ended (allocation_access)."""
        with self._db.read() as s:
            return Principal(allocation_id=allocation_access.allocation_of_token(s, hash_token(token)))
