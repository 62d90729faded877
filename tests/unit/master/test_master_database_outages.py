"""Riding out a database outage: which errors count as a lost connection, what the store raises
when one strikes (and whether the commit is in doubt), and when a call runs again and for how long.
The PostgreSQL cases lose real connections (pg_terminate_backend), not imitations of them."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import psycopg2
import psycopg2.errors
import pytest
from google.protobuf import empty_pb2
from sqlalchemy import event, text
from sqlalchemy import exc as sa_exc

from cairn.metadata_keys import COMMIT_UNKNOWN_KEY
from services.master.domain.kernel import outage
from services.master.domain.kernel.errors import DatabaseUnavailable, NotFound, Unavailable
from services.master.domain.kernel.outage import OutagePolicy, ride_out
from services.master.servicers.errors import rpc
from services.master.store.db import Database
from services.master.store.outages import count_commit, is_disconnect
from tests.support.databases import fresh_database

# Any message will do: the edge checks it, the handlers below ignore it.
REQUEST = empty_pb2.Empty()
QUICK = OutagePolicy(budget_s=0.6, first_delay_s=0.02, max_delay_s=0.1)


def _wrapped(orig: BaseException) -> sa_exc.OperationalError:
    return sa_exc.OperationalError("SELECT 1", {}, orig)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "error",
    [
        psycopg2.OperationalError("server closed the connection unexpectedly"),
        psycopg2.OperationalError(
            'connection to server at "127.0.0.1", port 5999 failed: Connection refused'
        ),
        psycopg2.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg2.errors.CannotConnectNow("the database system is starting up"),
        psycopg2.errors.ConnectionFailure("connection failure"),
        psycopg2.InterfaceError("connection already closed"),
        _wrapped(psycopg2.OperationalError("server closed the connection unexpectedly")),
        sa_exc.DisconnectionError("pooled connection is gone"),
    ],
    ids=repr,
)
def test_lost_connections_are_outages(error: BaseException) -> None:
    assert is_disconnect(error)


@pytest.mark.parametrize(
    "error",
    [
        psycopg2.errors.QueryCanceled("canceling statement due to statement timeout"),
        psycopg2.errors.DiskFull("could not extend file"),
        psycopg2.errors.UniqueViolation("duplicate key"),
        _wrapped(sqlite3.OperationalError("database is locked")),
        sa_exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed")),  # type: ignore[arg-type]
        ValueError("not a database error"),
    ],
    ids=repr,
)
def test_other_database_errors_are_not(error: BaseException) -> None:
    assert not is_disconnect(error)


def test_a_wrapped_error_whose_connection_sqlalchemy_invalidated_is_an_outage() -> None:
    error = sa_exc.DBAPIError("SELECT 1", {}, Exception("gone"), connection_invalidated=True)  # type: ignore[arg-type]
    assert is_disconnect(error)


# -- ride_out ------------------------------------------------------------------------------------


def _failing(times: int, error: Callable[[], BaseException]) -> tuple[Callable[[], str], list[int]]:
    runs: list[int] = []

    def call() -> str:
        runs.append(1)
        if len(runs) <= times:
            raise error()
        return "done"

    return call, runs


def test_a_call_an_outage_interrupted_runs_again_until_it_succeeds() -> None:
    call, runs = _failing(3, lambda: DatabaseUnavailable("lost"))
    assert ride_out(call, what="test", policy=QUICK) == "done"
    assert len(runs) == 4


def test_an_outage_that_outlasts_the_budget_ends_in_database_unavailable() -> None:
    call, runs = _failing(10_000, lambda: DatabaseUnavailable("lost"))
    with pytest.raises(DatabaseUnavailable, match=r"gave up after .* tries"):
        ride_out(call, what="test", policy=QUICK)
    # It gave up within its budget: no more tries than the budget holds at the shortest delay (a
    # count, where the seconds it took stretch on a loaded machine).
    assert 3 <= len(runs) <= QUICK.budget_s / QUICK.first_delay_s + 1


def test_a_commit_in_doubt_runs_again_only_when_the_call_is_idempotent() -> None:
    call, runs = _failing(1, lambda: DatabaseUnavailable("lost at commit", commit_unknown=True))
    with pytest.raises(DatabaseUnavailable) as caught:
        ride_out(call, what="test", policy=QUICK)
    assert caught.value.commit_unknown and len(runs) == 1

    call, runs = _failing(1, lambda: DatabaseUnavailable("lost at commit", commit_unknown=True))
    assert ride_out(call, what="test", policy=QUICK, idempotent=True) == "done"
    assert len(runs) == 2


def test_a_call_that_stored_part_of_its_work_does_not_run_again() -> None:
    runs: list[int] = []

    def call() -> str:
        runs.append(1)
        count_commit()  # its first unit of work committed...
        raise DatabaseUnavailable("lost before the transaction committed")  # ...its second did not

    with pytest.raises(DatabaseUnavailable, match="part of this call was stored") as caught:
        ride_out(call, what="test", policy=QUICK)
    assert caught.value.commit_unknown and len(runs) == 1


def test_a_raw_lost_connection_is_an_outage_whose_commit_is_in_doubt() -> None:
    call, runs = _failing(1, lambda: psycopg2.OperationalError("server closed the connection unexpectedly"))
    with pytest.raises(DatabaseUnavailable) as caught:
        ride_out(call, what="test", policy=QUICK)
    assert caught.value.commit_unknown and len(runs) == 1


@pytest.mark.parametrize(
    "error", [lambda: NotFound("trial 3 not found"), lambda: Unavailable("the searcher did not answer")]
)
def test_other_errors_pass_through_at_once(error: Callable[[], BaseException]) -> None:
    call, runs = _failing(1, error)
    with pytest.raises(type(error())):
        ride_out(call, what="test", policy=QUICK)
    assert len(runs) == 1


def test_the_pause_ends_when_the_master_stops() -> None:
    stopping = threading.Event()
    stopping.set()
    call, runs = _failing(10_000, lambda: DatabaseUnavailable("lost"))
    with pytest.raises(DatabaseUnavailable, match="gave up"):
        ride_out(call, what="test", policy=OutagePolicy(budget_s=60), stopping=stopping)
    assert len(runs) == 1


# -- the master's gRPC edge ----------------------------------------------------------------------


class _Aborted(Exception):
    pass


class _Context:
    def __init__(self) -> None:
        self.status: tuple[grpc.StatusCode, str] | None = None
        self.trailing_metadata: tuple[tuple[str, str], ...] = ()

    def set_trailing_metadata(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.trailing_metadata = metadata

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.status = (code, details)
        raise _Aborted()


class _Servicer:
    def __init__(self, failures: int, commit_unknown: bool = False) -> None:
        self.failures = failures
        self.commit_unknown = commit_unknown
        self.runs = 0

    def _run(self) -> str:
        self.runs += 1
        if self.runs <= self.failures:
            raise DatabaseUnavailable("the database is unavailable", commit_unknown=self.commit_unknown)
        return "response"

    @rpc
    def GetExperiment(self, request: Any, context: Any) -> str:
        return self._run()

    @rpc
    def ReportTrialMetricsBatch(self, request: Any, context: Any) -> str:
        return self._run()

    @rpc
    def CreateExperiment(self, request: Any, context: Any) -> str:
        return self._run()


@pytest.fixture
def quick_outages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage, "OUTAGE_POLICY", QUICK)


@pytest.mark.usefixtures("quick_outages")
def test_the_edge_runs_a_call_again_through_a_short_outage() -> None:
    servicer = _Servicer(failures=2)
    assert servicer.GetExperiment(REQUEST, _Context()) == "response"
    assert servicer.runs == 3


@pytest.mark.usefixtures("quick_outages")
def test_the_edge_answers_unavailable_after_the_budget_never_unknown() -> None:
    servicer, context = _Servicer(failures=10_000), _Context()
    with pytest.raises(_Aborted):
        servicer.GetExperiment(REQUEST, context)
    assert context.status is not None
    code, details = context.status
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "GetExperiment" in details and "database is unavailable" in details


@pytest.mark.usefixtures("quick_outages")
def test_the_edge_repeats_a_commit_in_doubt_only_for_idempotent_calls() -> None:
    reports = _Servicer(failures=1, commit_unknown=True)
    assert reports.ReportTrialMetricsBatch(REQUEST, _Context()) == "response"
    assert reports.runs == 2

    creation, context = _Servicer(failures=1, commit_unknown=True), _Context()
    with pytest.raises(_Aborted):
        creation.CreateExperiment(REQUEST, context)
    assert creation.runs == 1
    assert context.status is not None and context.status[0] == grpc.StatusCode.UNAVAILABLE
    # Marked, so that clients do not send it again either (cairn.client.unavailable_retry).
    assert context.trailing_metadata == ((COMMIT_UNKNOWN_KEY, "1"),)


# -- the store on a real PostgreSQL --------------------------------------------------------------


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[Database]:
    with fresh_database("postgres", tmp_path) as url:
        assert url is not None
        database = Database(url)
        with database.transaction() as s:
            s.execute(text("CREATE TABLE notes (id serial PRIMARY KEY, body text NOT NULL)"))
        try:
            yield database
        finally:
            database.dispose()


def _terminate_own_backend(connection: Any) -> None:
    """Ends the server side of `connection` (a DBAPI connection) from another connection, as a
    server restart does."""
    pid = connection.get_backend_pid()
    admin = psycopg2.connect(connection.dsn)
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", (pid,))
    finally:
        admin.close()


def _notes(database: Database) -> list[str]:
    with database.read() as s:
        return list(s.scalars(text("SELECT body FROM notes ORDER BY id")))


def test_a_connection_lost_mid_transaction_stores_nothing_and_the_next_one_works(pg: Database) -> None:
    with pytest.raises(DatabaseUnavailable) as caught, pg.transaction() as s:
        s.execute(text("INSERT INTO notes (body) VALUES ('lost')"))
        _terminate_own_backend(s.connection().connection.dbapi_connection)
        s.execute(text("INSERT INTO notes (body) VALUES ('also lost')"))
    assert not caught.value.commit_unknown
    # A fresh connection, no waiting: the pool dropped the dead one.
    with pg.transaction() as s:
        s.execute(text("INSERT INTO notes (body) VALUES ('kept')"))
    assert _notes(pg) == ["kept"]


def test_a_connection_lost_at_commit_leaves_the_commit_in_doubt(pg: Database) -> None:
    def lose_it(connection: Any) -> None:
        _terminate_own_backend(connection.connection.dbapi_connection)

    event.listen(pg.engine, "commit", lose_it)
    try:
        with (
            pytest.raises(DatabaseUnavailable, match="may or may not be stored") as caught,
            pg.transaction() as s,
        ):
            s.execute(text("INSERT INTO notes (body) VALUES ('in doubt')"))
    finally:
        event.remove(pg.engine, "commit", lose_it)
    assert caught.value.commit_unknown
    assert _notes(pg) == []  # here it was not stored; a server could as well have applied it


def test_a_connection_lost_during_a_read_is_an_outage(pg: Database) -> None:
    with pytest.raises(DatabaseUnavailable), pg.read() as s:
        _terminate_own_backend(s.connection().connection.dbapi_connection)
        s.execute(text("SELECT 1"))
    assert _notes(pg) == []


def test_ride_out_carries_a_unit_of_work_over_a_lost_connection(pg: Database) -> None:
    lost: list[int] = []

    def add_note() -> None:
        with pg.transaction() as s:
            s.execute(text("INSERT INTO notes (body) VALUES ('once')"))
            if not lost:
                lost.append(1)
                _terminate_own_backend(s.connection().connection.dbapi_connection)
                s.execute(text("SELECT 1"))

    ride_out(add_note, what="test", policy=QUICK)
    assert _notes(pg) == ["once"]
