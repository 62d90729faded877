"""Users, passwords and session tokens.

Passwords: Determined-compatible clients send sha512(salt + password) ("is_hashed"); plain ones are
salted the same way here, so both forms converge on one value, which is stored only as a PBKDF2
hash. Tokens: random, returned once, stored only as sha256, valid for a fixed time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select

from cairn.client.password import salt_and_hash
from services.common.principal import Principal
from services.master.domain.clock import utcnow
from services.master.domain.errors import InvalidArgument, PermissionDenied, Unauthenticated
from services.master.store import models
from services.master.store.db import Database

PBKDF2_ITERATIONS = 120_000
# Accounts every fresh cluster has, as in Determined (both start with an empty password).
BUILTIN_USERS = (("admin", True), ("determined", False))
# A validated token is trusted for this long without another database read.
TOKEN_CACHE_SECONDS = 10.0


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def hash_password(salted: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", salted.encode(), salt, PBKDF2_ITERATIONS)
    salt_b64, digest_b64 = base64.b64encode(salt).decode(), base64.b64encode(digest).decode()
    return f"pbkdf2_sha256${PBKDF2_ITERATIONS}${salt_b64}${digest_b64}"


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


def _user_info(user: models.User) -> UserInfo:
    return UserInfo(
        id=user.id,
        username=user.username,
        admin=user.admin,
        active=user.active,
        display_name=user.display_name,
        modified_at=user.modified_at.isoformat(),
        last_auth_at=user.last_auth_at.isoformat() if user.last_auth_at else "",
    )


class AuthService:
    def __init__(self, db: Database, session_ttl_seconds: int) -> None:
        self._db = db
        self._ttl = timedelta(seconds=session_ttl_seconds)
        self._cache: dict[str, tuple[Principal, float]] = {}
        self._cache_lock = threading.Lock()

    def ensure_builtin_users(self) -> None:
        with self._db.transaction() as s:
            existing = set(s.scalars(select(models.User.username)))
            now = utcnow()
            for username, admin in BUILTIN_USERS:
                if username not in existing:
                    s.add(
                        models.User(
                            username=username,
                            password_hash=hash_password(salt_and_hash("")),
                            admin=admin,
                            active=True,
                            display_name="",
                            created_at=now,
                            modified_at=now,
                        )
                    )

    def login(self, username: str, password: str, is_hashed: bool) -> tuple[str, UserInfo]:
        if not username:
            raise InvalidArgument("username: required")
        # Determined's clients send an empty password as is, even with is_hashed set.
        salted = password if is_hashed and password else salt_and_hash(password)
        with self._db.transaction() as s:
            user = s.scalar(select(models.User).where(models.User.username == username))
            # One message for "no such user" and "wrong password": do not reveal which.
            if user is None or not verify_password(salted, user.password_hash):
                raise Unauthenticated("invalid credentials")
            if not user.active:
                raise PermissionDenied(f"user '{username}' is deactivated")
            token = new_token()
            now = utcnow()
            s.add(
                models.UserSession(
                    user_id=user.id, token_hash=hash_token(token), created_at=now, expires_at=now + self._ttl
                )
            )
            user.last_auth_at = now
            # Expired sessions are pruned here, where they would otherwise only grow.
            s.execute(delete(models.UserSession).where(models.UserSession.expires_at < now))
            return token, _user_info(user)

    def logout(self, token: str) -> None:
        token_hash = hash_token(token)
        with self._db.transaction() as s:
            s.execute(delete(models.UserSession).where(models.UserSession.token_hash == token_hash))
        with self._cache_lock:
            self._cache.pop(token_hash, None)

    def user(self, user_id: int) -> UserInfo:
        with self._db.read() as s:
            user = s.get(models.User, user_id)
            if user is None:
                raise Unauthenticated("user no longer exists")
            return _user_info(user)

    def authenticate_user_token(self, token: str) -> Principal:
        token_hash = hash_token(token)
        now_mono = time.monotonic()
        with self._cache_lock:
            hit = self._cache.get(token_hash)
            if hit and hit[1] > now_mono:
                return hit[0]
        with self._db.read() as s:
            row = s.execute(
                select(models.UserSession, models.User)
                .join(models.User, models.User.id == models.UserSession.user_id)
                .where(models.UserSession.token_hash == token_hash)
            ).first()
            if row is None:
                raise Unauthenticated("invalid credentials: unknown or revoked token")
            session, user = row
            if session.expires_at < utcnow():
                raise Unauthenticated("session expired: log in again")
            if not user.active:
                raise PermissionDenied(f"user '{user.username}' is deactivated")
            principal = Principal(user_id=user.id, username=user.username, admin=user.admin)
        with self._cache_lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[token_hash] = (principal, now_mono + TOKEN_CACHE_SECONDS)
        return principal

    def authenticate_allocation_token(self, token: str) -> Principal:
        token_hash = hash_token(token)
        with self._db.read() as s:
            allocation_id = s.scalar(
                select(models.Allocation.id).where(models.Allocation.token_hash == token_hash)
            )
            if allocation_id is None:
                raise Unauthenticated("invalid allocation token")
            return Principal(allocation_id=allocation_id)
