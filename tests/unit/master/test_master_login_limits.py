"""Login rate limits (domain/identity/login_limiter.py), session lifetime, built-in passwords and the
loopback rule (domain/identity/exposure.py): what a guessing client, an expired token and a master bound
beyond loopback are told."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.client.password import salt_and_hash
from services.master.domain.identity import login_limiter
from services.master.domain.identity.auth import AuthService
from services.master.domain.identity.exposure import UnsafeExposure, check_exposure, is_loopback
from services.master.domain.identity.login_limiter import (
    LoginLimiter,
    LoginLimits,
    client_address,
    login_address,
)
from services.master.domain.kernel.errors import ResourceExhausted, Unauthenticated
from services.master.store.db import Database


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'auth.db'}")
    database.migrate()
    yield database
    database.dispose()


def test_failures_pause_a_user_until_the_window_passes_and_say_when() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(LoginLimits(failures_per_user=3, failures_per_address=100, window_s=60), clock)
    for _ in range(3):
        limiter.check("admin", "10.0.0.1")
        limiter.failed("admin", "10.0.0.1")
        clock.now += 1
    with pytest.raises(
        ResourceExhausted, match=r"too many failed logins for user admin \(3 in 60s\): retry in 57s"
    ):
        limiter.check("admin", "10.0.0.2")  # another address: the user is paused wherever it is
    limiter.check("someone-else", "10.0.0.1")  # the address is still under its own limit
    clock.now += 57
    limiter.check("admin", "10.0.0.1")  # the oldest failure left the window


def test_failures_pause_an_address_across_usernames() -> None:
    clock = FakeClock()
    limiter = LoginLimiter(LoginLimits(failures_per_user=100, failures_per_address=5, window_s=30), clock)
    for i in range(5):
        limiter.failed(f"user{i}", "10.0.0.9")
    with pytest.raises(ResourceExhausted, match=r"address 10.0.0.9 .*retry in 30s"):
        limiter.check("new-name", "10.0.0.9")
    limiter.check("new-name", "10.0.0.10")


def test_a_success_clears_the_user_but_not_the_address() -> None:
    limiter = LoginLimiter(LoginLimits(failures_per_user=2, failures_per_address=3, window_s=60), FakeClock())
    limiter.failed("alice", "10.0.0.1")
    limiter.failed("alice", "10.0.0.1")
    limiter.succeeded("alice")
    limiter.check("alice", "10.0.0.2")
    limiter.failed("bob", "10.0.0.1")
    with pytest.raises(ResourceExhausted, match=r"address 10\.0\.0\.1"):
        limiter.check("alice", "10.0.0.1")


def test_memory_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(login_limiter, "MAX_TRACKED_KEYS", 50)
    limiter = LoginLimiter(LoginLimits(failures_per_user=3, failures_per_address=3, window_s=60), FakeClock())
    for i in range(1000):
        for _ in range(5):  # more failures than the limit: each key keeps at most its limit
            limiter.failed(f"user{i}", f"10.1.{i // 256}.{i % 256}")
    assert len(limiter._failures) == 50
    assert all(len(times) <= 3 for times in limiter._failures.values())


def test_client_address_from_grpc_and_gateway_peers() -> None:
    assert client_address("ipv4:10.1.2.3:51234") == "10.1.2.3"
    assert client_address("ipv6:[::1]:51234") == "::1"
    assert client_address("http:192.168.1.5") == "192.168.1.5"
    assert client_address("unix:/tmp/sock") == "unix:/tmp/sock"


def test_a_login_through_an_http_worker_counts_against_the_http_client() -> None:
    # A worker process of the HTTP port calls in over loopback, the HTTP client named last.
    assert login_address("ipv4:127.0.0.1:40000", ["198.51.100.7, 203.0.113.9"]) == "203.0.113.9"
    assert login_address("ipv6:[::1]:40000", ["203.0.113.9"]) == "203.0.113.9"
    assert login_address("ipv4:127.0.0.1:40000", []) == "127.0.0.1"
    # Beyond loopback the header is the caller's word only: the peer counts.
    assert login_address("ipv4:10.1.2.3:5000", ["203.0.113.9"]) == "10.1.2.3"


def test_login_is_limited_and_refused_attempts_are_not_checked(db: Database) -> None:
    limiter = LoginLimiter(LoginLimits(failures_per_user=2, failures_per_address=50, window_s=60))
    auth = AuthService(db, 3600, limiter)
    auth.ensure_builtin_users()
    for _ in range(2):
        with pytest.raises(Unauthenticated, match="invalid credentials"):
            auth.login("admin", "wrong", is_hashed=False, client_address="10.0.0.1")
    # Even the right password is refused while paused: a guess that lands learns nothing.
    with pytest.raises(ResourceExhausted, match="user admin"):
        auth.login("admin", "", is_hashed=False, client_address="10.0.0.1")
    token, info = auth.login("determined", "", is_hashed=False, client_address="10.0.0.1")
    assert info.username == "determined" and token


def test_sessions_end_after_the_configured_lifetime(db: Database) -> None:
    auth = AuthService(db, 1)
    auth.ensure_builtin_users()
    token, _ = auth.login("determined", salt_and_hash(""), is_hashed=True)
    assert auth.authenticate_user_token(token).username == "determined"  # now cached
    time.sleep(1.2)
    # The cache never outlives the session: the expired token is refused at once.
    with pytest.raises(Unauthenticated, match=r"session expired \(sessions last 1s\): log in again"):
        auth.authenticate_user_token(token)


def test_initial_password_reaches_builtin_accounts_without_one(db: Database) -> None:
    AuthService(db, 3600).ensure_builtin_users()
    assert AuthService(db, 3600).builtin_users_without_password() == ["admin", "determined"]
    auth = AuthService(db, 3600, initial_password="S3cret-pass")
    auth.ensure_builtin_users()
    assert auth.builtin_users_without_password() == []
    with pytest.raises(Unauthenticated):
        auth.login("admin", "", is_hashed=False)
    assert auth.login("admin", "S3cret-pass", is_hashed=False)[1].admin


def test_a_master_beyond_loopback_needs_passwords() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2", "[::1]"):
        assert is_loopback(host), host
        check_exposure(host, ["admin", "determined"])
    for host in ("0.0.0.0", "10.0.0.5", "::", "master.example.com"):
        assert not is_loopback(host), host
        check_exposure(host, [])
    with pytest.raises(
        UnsafeExposure,
        match=r"--host 0.0.0.0 .*admin, determined have an empty password.*--initial-user-password",
    ):
        check_exposure("0.0.0.0", ["admin", "determined"])
