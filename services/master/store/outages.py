"""Telling a lost database connection from a real database error.

A PostgreSQL server that restarts, or a network that drops, ends every open connection and refuses
new ones for a while: whatever was in flight fails, and trying again on a fresh connection once the
server is back succeeds. Those failures are transient. Everything else (a constraint violated, a
statement cancelled, SQLite's "database is locked" after its busy timeout) is not: trying again
would fail the same way or hide a bug.
"""

from __future__ import annotations

import threading

import psycopg2
import psycopg2.errors
from sqlalchemy import exc as sa_exc

# SQLSTATEs the server sends as it goes away or before it accepts work again: class 08 (connection
# exception), admin_shutdown, crash_shutdown, cannot_connect_now ("the database system is starting
# up"). psycopg2 raises each as its own subclass of OperationalError; the others of those
# (query_canceled, out of memory, disk full, ...) are not outages.
_OUTAGE_SQLSTATES = ("08000", "08001", "08003", "08004", "08006", "08007", "08P01", "57P01", "57P02", "57P03")
_OUTAGE_ERRORS = tuple(psycopg2.errors.lookup(code) for code in _OUTAGE_SQLSTATES)


def is_disconnect(exc: BaseException) -> bool:
    """Whether `exc` means the connection to the database was lost or could not be made."""
    if isinstance(exc, sa_exc.DisconnectionError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        return _is_psycopg2_outage(exc.orig)
    return _is_psycopg2_outage(exc)


def _is_psycopg2_outage(exc: BaseException | None) -> bool:
    if isinstance(exc, psycopg2.InterfaceError):
        return True  # "connection already closed": the client side of a lost connection
    if isinstance(exc, _OUTAGE_ERRORS):
        return True
    if type(exc) is psycopg2.OperationalError:
        # No SQLSTATE: the client library's own failure (refused, reset, "server closed the
        # connection unexpectedly"). A SQLSTATE psycopg2 has no class for is judged by its code.
        code = exc.pgcode
        return code is None or code in _OUTAGE_SQLSTATES or code.startswith("08")
    return False


# Transactions committed by the current thread. A call that failed in an outage may be run again
# only if it stored nothing; comparing this count before and after tells (see domain/kernel/outage.py).
_commits = threading.local()


def commits_on_this_thread() -> int:
    return int(getattr(_commits, "count", 0))


def count_commit() -> None:
    _commits.count = commits_on_this_thread() + 1
