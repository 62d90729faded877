"""The leader lease against a real PostgreSQL (one database per test), and the SQLite single-master lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg2
import pytest
from sqlalchemy.engine import make_url

from services.master.configuration.lease import LeaseTiming
from services.master.leadership import (
    LEASE_KEY,
    DatabaseUnreachable,
    LeaderLease,
    SqliteDatabaseBusy,
    SqliteMasterLock,
)
from tests.support.databases import fresh_database

FAST = LeaseTiming(poll_interval_s=0.02, check_interval_s=0.1, takeover_delay_s=0.3, regain_within_s=5.0)


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    with fresh_database("postgres", tmp_path) as url:
        assert url is not None
        yield url


def connect(url: str, database: str) -> psycopg2.extensions.connection:
    dsn = make_url(url).set(database=database).render_as_string(hide_password=False)
    connection = psycopg2.connect(dsn.replace("postgresql+psycopg2", "postgresql"))
    connection.autocommit = True
    return connection


@pytest.fixture
def admin(pg_url: str) -> Iterator[psycopg2.extensions.connection]:
    """A session on the test's database."""
    connection = connect(pg_url, str(make_url(pg_url).database))
    yield connection
    connection.close()


class Losses:
    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.event = threading.Event()

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)
        self.event.set()


def lock_holders(admin: psycopg2.extensions.connection) -> list[int]:
    with admin.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        return [row[0] for row in cursor.fetchall()]


def terminate(admin: psycopg2.extensions.connection, pid: int) -> None:
    with admin.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", (pid,))


def waiting(lease: LeaderLease, stop: threading.Event) -> tuple[threading.Thread, list[bool]]:
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(lease.wait_until_held(stop)), daemon=True)
    thread.start()
    return thread, result


def eventually(check: Callable[[], bool], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


class _RecordingStop(threading.Event):
    """A stop event that records each wait asked of it: what a lease waited for, not how long."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return super().wait(timeout)


def test_one_master_leads_the_other_waits_and_takes_over_when_it_is_gone(
    pg_url: str, admin: psycopg2.extensions.connection
) -> None:
    first, second = LeaderLease(pg_url, Losses(), FAST), LeaderLease(pg_url, Losses(), FAST)
    stop = threading.Event()
    try:
        first_look = _RecordingStop()
        assert first.wait_until_held(first_look) is True
        # Free at the first look: no poll, no takeover delay waited.
        assert first_look.waits == []
        assert len(lock_holders(admin)) == 1
        thread, result = waiting(second, stop)
        time.sleep(0.5)
        assert result == [] and not second.held
        first.release()
        thread.join(timeout=10)
        assert result == [True] and second.held
        assert len(lock_holders(admin)) == 1
    finally:
        stop.set()
        first.release()
        second.release()


def test_a_leader_whose_lock_session_is_terminated_fences_itself_and_the_standby_leads(
    pg_url: str, admin: psycopg2.extensions.connection
) -> None:
    leader_losses = Losses()
    leader = LeaderLease(pg_url, leader_losses, LeaseTiming(check_interval_s=1.0, regain_within_s=5.0))
    standby = LeaderLease(pg_url, Losses(), FAST)
    stop = threading.Event()
    try:
        assert leader.wait_until_held(stop)
        leader.start_watching()
        thread, result = waiting(standby, stop)
        time.sleep(0.3)
        assert result == []
        [pid] = lock_holders(admin)
        terminate(admin, pid)
        # Another master takes the lock before the leader notices (the standby, or this session
        # spinning on it: either wins the race against the leader's check and reconnect).
        deadline = time.monotonic() + 5
        held_here = False
        while not (held_here or standby.held) and time.monotonic() < deadline:
            with admin.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_lock(%s)", (LEASE_KEY,))
                held_here = bool(cursor.fetchone()[0])
        assert held_here or standby.held
        # The leader's next check finds the lock taken: the lease is lost.
        assert leader_losses.event.wait(timeout=10)
        assert leader_losses.reasons == ["another master holds the leader lease"]
        if held_here:
            with admin.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", (LEASE_KEY,))
        # The standby leads, alone.
        thread.join(timeout=10)
        assert result == [True] and standby.held
        assert len(lock_holders(admin)) == 1 and lock_holders(admin) != [pid]
    finally:
        stop.set()
        leader.release()
        standby.release()


def test_a_leader_alone_regains_its_lock_after_its_session_ends(
    pg_url: str, admin: psycopg2.extensions.connection
) -> None:
    losses = Losses()
    leader = LeaderLease(pg_url, losses, FAST)
    try:
        assert leader.wait_until_held(threading.Event())
        leader.start_watching()
        [pid] = lock_holders(admin)
        terminate(admin, pid)
        assert eventually(lambda: len(lock_holders(admin)) == 1 and lock_holders(admin) != [pid])
        time.sleep(0.3)
        assert losses.reasons == [] and leader.held
    finally:
        leader.release()
    assert eventually(lambda: lock_holders(admin) == [])


def test_a_leader_that_cannot_reach_the_database_gives_up_after_the_grace(
    pg_url: str, admin: psycopg2.extensions.connection
) -> None:
    losses = Losses()
    leader = LeaderLease(pg_url, losses, LeaseTiming(check_interval_s=0.05, regain_within_s=0.5))
    database = make_url(pg_url).database
    server = connect(pg_url, "postgres")
    try:
        assert leader.wait_until_held(threading.Event())
        leader.start_watching()
        # The database goes out of reach: the lock session ends and no new session is let in.
        with server.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS false')
        [pid] = lock_holders(admin)
        terminate(admin, pid)
        assert losses.event.wait(timeout=10)
        assert "out of reach" in losses.reasons[0]
    finally:
        with server.cursor() as cursor:
            cursor.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS true')
        server.close()
        leader.release()


def test_a_standby_told_to_stop_stops_waiting(pg_url: str) -> None:
    leader, standby = LeaderLease(pg_url, Losses(), FAST), LeaderLease(pg_url, Losses(), FAST)
    stop = threading.Event()
    try:
        assert leader.wait_until_held(threading.Event())
        thread, result = waiting(standby, stop)
        time.sleep(0.2)
        stop.set()
        thread.join(timeout=5)
        assert result == [False] and not standby.held
    finally:
        leader.release()
        standby.release()


def test_a_master_that_cannot_reach_the_database_at_start_says_so_at_once() -> None:
    lease = LeaderLease("postgresql://cairn@127.0.0.1:1/cairn", Losses(), FAST)
    try:
        with pytest.raises(DatabaseUnreachable, match="cannot reach the database"):
            lease.wait_until_held(threading.Event())
    finally:
        lease.release()


def test_a_second_master_on_one_sqlite_file_is_refused_with_a_pointer_to_postgresql(tmp_path: Path) -> None:
    database = tmp_path / "cairn.db"
    first, second = SqliteMasterLock(database), SqliteMasterLock(database)
    first.acquire()
    with pytest.raises(SqliteDatabaseBusy, match="PostgreSQL") as refused:
        second.acquire()
    assert str(database) in str(refused.value)
    first.release()
    second.acquire()
    second.release()
