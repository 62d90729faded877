"""Which master serves a database: the leader lease (PostgreSQL) and the single-master lock (SQLite).

PostgreSQL: every master takes a session-level advisory lock on a connection of its own before it
touches anything. The first to get it leads; a master started beside it is a standby that tries
again every `poll_interval_s` and opens no port until it leads, so clients and agents dialling it
are refused and move on to the leader. The lock needs no table and no clock: it is released the
moment the leader's process dies (kill -9 included: the kernel closes its socket and the server
ends the session), and advisory locks are scoped to the database, so clusters sharing a server
do not contend.

Fencing: a leader that is alive but has lost the connection holding the lock (the session was
terminated, the network failed) must stop before another master writes. It checks that
connection every `check_interval_s`; when it is gone it tries to take the lock again. If another
master holds it, or the database stays out of reach for `regain_within_s`, the lease is lost and
`on_lost` is called (the master exits at once, and a supervisor restarts it as a standby). A
master that won the lease from another master waits `takeover_delay_s` before serving, which is
longer than the old leader needs to notice (one check, a failed reconnect): so two leaders never
write at the same time. Regaining the lock after a PostgreSQL restart is not a loss: while the
database was down nobody could write, and a master that won the lock after it would still hold it.
The one case this cannot see is a double fault inside `regain_within_s`: a leader cut off from the
database while a standby reached it, took over and died again before the cut healed. The bound keeps
that window short; a longer one would need a leadership epoch stored in the database.

SQLite: one master per database file, held by an exclusive file lock; a second is refused with a
message that points at PostgreSQL.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Literal

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from services.common.logging import get_logger
from services.master.configuration.lease import LeaseTiming

log = get_logger(__name__)

# pg_try_advisory_lock's key: the first 8 bytes of sha256(b"cairn-master-leader") as a signed
# 64-bit integer. Any constant would do; this one is unlikely to meet another program's.
LEASE_KEY = 3_622_568_624_585_464_978

# The exit status of a master that lost the lease (a supervisor restarts it, as a standby).
LEASE_LOST_EXIT_CODE = 3

# How often a leader that lost its lock connection tries to take the lock again.
REGAIN_INTERVAL_S = 0.5

# The lock connection notices a dead peer quickly on both ends: libpq's keepalives and
# tcp_user_timeout end a hung check in seconds (the client side), and the server's keepalives end
# the session of a leader the network cut off, releasing its lock for a standby (~11 s).
_CLIENT_CONNECT_ARGS = {
    "connect_timeout": 2,
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 1,
    "keepalives_count": 3,
    "tcp_user_timeout": 3000,
    "application_name": "cairn-master-lease",
}
_SERVER_KEEPALIVES = (
    "SET tcp_keepalives_idle = 5",
    "SET tcp_keepalives_interval = 2",
    "SET tcp_keepalives_count = 3",
)


class CannotLead(Exception):
    """This master cannot take the database: it says why, for the operator."""


class DatabaseUnreachable(CannotLead):
    pass


class SqliteDatabaseBusy(CannotLead):
    pass


class LeaderLease:
    """The PostgreSQL leader lease of one master process."""

    def __init__(
        self,
        database_url: str,
        on_lost: Callable[[str], None],
        timing: LeaseTiming | None = None,
    ) -> None:
        self._engine = _lock_engine(database_url)
        self._on_lost = on_lost
        self.timing = timing or LeaseTiming()
        self._connection: Connection | None = None
        self._closing = threading.Event()
        self._watcher: threading.Thread | None = None
        self._last_error = ""

    @property
    def held(self) -> bool:
        return self._connection is not None

    def wait_until_held(self, stop: threading.Event) -> bool:
        """Block until this master leads (True) or `stop` is set (False). Raises DatabaseUnreachable
        when the first try cannot reach the database: a wrong URL or password is reported at once,
        not waited on; an outage that starts later is waited out."""
        waited = False
        unreachable = False
        while not stop.is_set():
            outcome = self._try_acquire()
            if outcome == "held":
                break
            if outcome == "unreachable" and not waited:
                raise DatabaseUnreachable(
                    f"cannot reach the database to take the leader lease: {self._last_error}"
                )
            if not waited:
                log.info("standby: another master leads; waiting for the leader lease")
                waited = True
            if (outcome == "unreachable") != unreachable:
                unreachable = outcome == "unreachable"
                if unreachable:
                    log.warning("standby: the database is out of reach", error=self._last_error)
            stop.wait(self.timing.poll_interval_s)
        else:
            return False
        if waited:
            # A leader that is alive but lost its lock connection serves until it notices: wait
            # that out. A lease free at the first look was released before this master started.
            log.info("won the leader lease; taking over", in_s=self.timing.takeover_delay_s)
            if stop.wait(self.timing.takeover_delay_s):
                return False
        log.info("leading: holding the leader lease")
        return True

    def start_watching(self) -> None:
        """Check the lock connection from now on; `on_lost` is called if the lease is lost."""
        self._watcher = threading.Thread(target=self._watch, name="leader-lease", daemon=True)
        self._watcher.start()

    def release(self) -> None:
        """Give the lease up (closing the session releases the lock), e.g. on a clean stop."""
        self._closing.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5.0)
        self._drop_connection()
        self._engine.dispose()

    # -- the leader's watch ---------------------------------------------------------------------
    def _watch(self) -> None:
        last_ok = time.monotonic()
        while not self._closing.wait(self.timing.check_interval_s):
            if self._check():
                last_ok = time.monotonic()
                continue
            self._drop_connection()
            if self._closing.is_set():
                return
            log.warning("lost the connection that holds the leader lease; taking the lock again")
            lost = self._regain(last_ok)
            if lost is not None:
                if not self._closing.is_set():
                    self._on_lost(lost)
                return
            last_ok = time.monotonic()

    def _check(self) -> bool:
        connection = self._connection
        if connection is None:
            return False
        try:
            connection.execute(text("SELECT 1"))
            return True
        except SQLAlchemyError as exc:
            log.warning("leader lease check failed", error=_first_line(exc))
            return False

    def _regain(self, last_ok: float) -> str | None:
        """None when the lock is held again; else why the lease is lost."""
        while not self._closing.is_set():
            outcome = self._try_acquire()
            if outcome == "held":
                log.info("leader lease regained")
                return None
            if outcome == "taken":
                return "another master holds the leader lease"
            away = time.monotonic() - last_ok
            if away > self.timing.regain_within_s:
                return f"the database was out of reach for {away:.0f} s; the leader lease may have passed on"
            self._closing.wait(REGAIN_INTERVAL_S)
        return None

    # -- the lock --------------------------------------------------------------------------------
    def _try_acquire(self) -> Literal["held", "taken", "unreachable"]:
        try:
            connection = self._engine.connect()
        except SQLAlchemyError as exc:
            self._last_error = _first_line(exc)
            return "unreachable"
        try:
            for statement in _SERVER_KEEPALIVES:
                connection.execute(text(statement))
            won = connection.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": LEASE_KEY}).scalar()
        except SQLAlchemyError as exc:
            self._last_error = _first_line(exc)
            _close_quietly(connection)
            return "unreachable"
        if not won:
            _close_quietly(connection)
            return "taken"
        self._connection = connection
        return "held"

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            _close_quietly(connection)


def _lock_engine(database_url: str) -> Engine:
    url = make_url(database_url)
    if url.get_backend_name() in ("postgres", "postgresql"):
        url = url.set(drivername="postgresql+psycopg2")
    # One connection, opened and closed by this module alone: no pool to hand it to anyone else.
    return create_engine(
        url, poolclass=NullPool, isolation_level="AUTOCOMMIT", connect_args=dict(_CLIENT_CONNECT_ARGS)
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _close_quietly(connection: Connection) -> None:
    try:
        connection.close()
    except SQLAlchemyError:
        pass


def exit_at_once(reason: str) -> None:
    """Fencing: a master that lost the lease stops serving now, not after a graceful stop that
    would let in-flight calls write. The exit status tells a supervisor to start it again."""
    log.critical("lost the leader lease; exiting so that only one master serves", reason=reason)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(LEASE_LOST_EXIT_CODE)


class SqliteMasterLock:
    """One master per SQLite file: an exclusive lock on a file beside it, released when the
    process ends however it ends."""

    def __init__(self, database_file: Path) -> None:
        self.database_file = database_file
        self.path = database_file.with_name(database_file.name + ".master-lock")
        self._file: IO[bytes] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise SqliteDatabaseBusy(
                f"another master is using the SQLite database {self.database_file}; "
                "a standby master needs PostgreSQL (start both masters with --db-url postgresql://...)"
            ) from None
        self._file = handle

    def release(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            handle.close()
