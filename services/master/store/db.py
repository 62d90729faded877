"""Engine and session setup for SQLite (embedded default) and PostgreSQL, and schema migration."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, make_url, text
from sqlalchemy import exc as exc_module
from sqlalchemy.orm import Session, sessionmaker

from services.common.errors import DatabaseUnavailable
from services.master.store import json_updates, sqlite_batches
from services.master.store.outages import count_commit, is_disconnect
from services.master.store.sqlite_file import make_owner_only

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def _normalise_url(url: str) -> str:
    # Users write postgres:// (Heroku style) or postgresql://; SQLAlchemy wants a known dialect.
    if url.startswith("postgres://"):
        return "postgresql+psycopg2://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        return "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


def _tune_sqlite(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets readers proceed while one writer commits; busy_timeout makes writers queue, not fail.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


# Connections kept for reads, and how many more a burst may open (closed again when returned).
# With the write pool's 16 + 16, a master stays at or under 64 of PostgreSQL's default 100.
READ_POOL_SIZE = 24
READ_POOL_OVERFLOW = 8

# SQLite connections kept, and how many more a burst may open. Enough for the threads that read
# at once: with SQLAlchemy's default 5 + 10, at 1,000 agents whose trials print (each log batch
# then read its containers' owners on a thread of its own), most checkouts opened a new connection
# and ran _tune_sqlite's PRAGMAs again, a tenth of the master's samples (bench/README.md, "Agents
# whose trials print"). The log batches now read once per group commit; the API's readers and the
# streams' other work still come in bursts. A connection to a file costs a file handle and its
# page cache.
SQLITE_POOL_SIZE = 32
SQLITE_POOL_OVERFLOW = 16

# A pooled connection back from use within this long is handed out without a ping.
PING_AFTER_IDLE_S = 2.0


def _ping_idle_connections(engine: Engine) -> None:
    """Pessimistic disconnect handling, paid only where it buys something.

    pool_pre_ping costs a round trip on every checkout: for a REST read that is a tenth of its
    time. A connection used moments ago is as alive as a ping would show, so only connections that
    sat idle are pinged; a dead one is replaced before the caller sees it (the pool retries the
    checkout on DisconnectionError). A server that dies between two busy uses fails the statement
    in flight, as it would have with pre_ping, and SQLAlchemy invalidates the pool then.
    """

    @event.listens_for(engine, "checkin")
    def _returned(_dbapi_connection: Any, record: Any) -> None:
        record.info["returned_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _check(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        returned = record.info.get("returned_at")
        if returned is not None and time.monotonic() - returned < PING_AFTER_IDLE_S:
            return
        try:
            _ping(dbapi_connection)
        except Exception as exc:
            raise exc_module.DisconnectionError(f"pooled connection is gone: {exc}") from exc


def _roll_back_quietly(session: Session) -> None:
    # On a dead connection the rollback fails too; the error worth raising is the first one.
    try:
        session.rollback()
    except Exception:
        pass


def _lost(when: str, exc: BaseException) -> str:
    first_line = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0:1]
    detail = first_line[0] if first_line else type(exc).__name__
    return f"the database is unavailable ({when}): {detail}"


@contextlib.contextmanager
def _reads_lost_as_outages() -> Iterator[None]:
    """A read's lost or refused connection raised as DatabaseUnavailable; other errors as they are."""
    try:
        yield
    except Exception as exc:
        if is_disconnect(exc):
            raise DatabaseUnavailable(_lost("connection lost or refused during a read", exc)) from exc
        raise


def _ping(dbapi_connection: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SELECT 1")
    finally:
        cursor.close()


# Any run of 19 digits, in a number or not: orjson reads an integer past 64 bits as a float,
# silently (123456789012345678901234567890 came back as 1.2345678901234568e+29), so text that may
# hold one is left to json.loads. A long digit run in a string only costs the faster path.
_LONG_DIGIT_RUN = re.compile(r"[0-9]{19}")


def load_json_column(text: str) -> Any:
    """The JSON columns' decoder: orjson, in C, 3-4 times faster than json.loads on a config or a
    summary of metrics (every report reads its experiment's config, every trial's end four JSON
    columns). What orjson refuses or reads otherwise and Python's json module writes (NaN and
    Infinity, integers past 64 bits) is decoded by json.loads, as before."""
    if _LONG_DIGIT_RUN.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def _keep_what_a_transaction_loads(sessions: sessionmaker[Session]) -> None:
    """A transaction's session holds every object it loaded or stored until it ends (SQLAlchemy's
    "strong reference" recipe). Its identity map holds them only weakly: an object the code let go
    of, unchanged, was dropped, and the next get() of it in the same transaction read it again,
    flushing every pending change first. Ending a trial loaded its experiment three times so; a
    unit of work is short and its objects few, so keeping them costs nothing that lasts."""

    def keep(session: Session, instance: object) -> None:
        session.info.setdefault("kept", []).append(instance)

    for moment in ("loaded_as_persistent", "pending_to_persistent", "detached_to_persistent"):
        event.listen(sessions, moment, keep)


def _sqlite_pool(url: str) -> dict[str, int]:
    """The pool's bounds for a SQLite file; none for an in-memory database, whose one connection
    per thread (SQLAlchemy's SingletonThreadPool) takes no overflow."""
    if make_url(url).database in (None, "", ":memory:"):
        return {}
    return {"pool_size": SQLITE_POOL_SIZE, "max_overflow": SQLITE_POOL_OVERFLOW}


class Database:
    """The master's database: an engine, a session factory and transactions."""

    def __init__(self, url: str) -> None:
        self.url = _normalise_url(url)
        self.dialect = "sqlite" if self.url.startswith("sqlite") else "postgresql"
        if self.dialect == "sqlite":
            make_owner_only(self.url)
            self.engine: Engine = create_engine(
                self.url,
                connect_args={"check_same_thread": False, "timeout": 30},
                **_sqlite_pool(self.url),
                # No ping on checkout: a connection to a file cannot have been dropped by a server,
                # and the ping's `SELECT 1` let the GIL go and waited to take it back on every
                # checkout, which the busy master paid on each read and transaction.
                json_deserializer=load_json_column,
            )
            event.listen(self.engine, "connect", _tune_sqlite)
            sqlite_batches.install(self.engine)
        else:
            self.engine = create_engine(
                self.url,
                pool_size=16,
                max_overflow=16,
                json_deserializer=load_json_column,
                # A flush's UPDATEs of many rows of one table (a batch of agents' reports ends 40
                # allocations, their containers, trials and tasks) go in pages of 100 statements
                # a round trip (psycopg2's execute_batch), not a round trip a row, which is what
                # psycopg2's own executemany does. Its rowcount is then unknown, which no caller
                # reads after an executemany, and the ORM does not check without version columns.
                executemany_mode="values_plus_batch",
            )
            _ping_idle_connections(self.engine)
            json_updates.install(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        _keep_what_a_transaction_loads(self._sessions)
        # Reads on PostgreSQL run without a transaction: under READ COMMITTED every statement takes
        # its own snapshot whether or not a transaction wraps it, so BEGIN and ROLLBACK (a round
        # trip each, on every read) bought nothing. They get a pool of their own, set to autocommit
        # once per connection: switching a shared connection's mode on every checkout and back on
        # every return cost a tenth of a metrics read. SQLite keeps its transactions.
        self._read_engine: Engine | None = None
        if self.dialect == "postgresql":
            self._read_engine = create_engine(
                self.url,
                pool_size=READ_POOL_SIZE,
                max_overflow=READ_POOL_OVERFLOW,
                isolation_level="AUTOCOMMIT",
                # No transaction is ever open on these connections: nothing to roll back on return.
                pool_reset_on_return=None,
                json_deserializer=load_json_column,
            )
            _ping_idle_connections(self._read_engine)
        read_engine = self._read_engine or self.engine
        self._read_sessions = sessionmaker(read_engine, expire_on_commit=False)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session whose work commits together on success and rolls back on any exception.

        A lost connection raises DatabaseUnavailable: before the COMMIT was sent, nothing is
        stored; while it was in flight (`commit_unknown`), the server may have applied it or not.
        The pending changes are flushed first, so that only the COMMIT itself is ambiguous."""
        with self._sessions() as session:
            try:
                session.begin()
                yield session
                session.flush()
            except BaseException as exc:
                _roll_back_quietly(session)
                if is_disconnect(exc):
                    raise DatabaseUnavailable(
                        _lost("connection lost or refused before the transaction committed", exc)
                    ) from exc
                raise
            try:
                session.commit()
            except BaseException as exc:
                _roll_back_quietly(session)
                if is_disconnect(exc):
                    raise DatabaseUnavailable(
                        _lost(
                            "connection lost while the transaction committed; it may or may not be stored",
                            exc,
                        ),
                        commit_unknown=True,
                    ) from exc
                raise
            count_commit()

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads only (on PostgreSQL, outside any transaction); a lost connection
        raises DatabaseUnavailable."""
        with self._read_sessions() as session, _reads_lost_as_outages():
            yield session

    @contextlib.contextmanager
    def snapshot_read(self) -> Iterator[Session]:
        """As read(), but every statement sees one snapshot: for an answer built from rows that
        one writer changes together, read in several statements (a plain read takes a snapshot
        per statement on PostgreSQL, and pysqlite runs SELECTs outside a transaction). Costs a
        BEGIN and a ROLLBACK."""
        begin = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if self.dialect == "postgresql" else "BEGIN"
        with self._read_sessions() as session, _reads_lost_as_outages():
            connection = session.connection()
            connection.exec_driver_sql(begin)
            try:
                yield session
            finally:
                connection.exec_driver_sql("ROLLBACK")

    @contextlib.contextmanager
    def read_connection(self) -> Iterator[Connection]:
        """A connection for reads only, without a Session: for the hottest reads
        (store/prepared_select.py), where making and closing a Session cost a sixth of the read.
        Otherwise as read(): on PostgreSQL outside any transaction; a lost connection raises
        DatabaseUnavailable."""
        with _reads_lost_as_outages(), (self._read_engine or self.engine).connect() as connection:
            yield connection

    def migrate(self) -> None:
        """Bring the schema to the latest migration (idempotent).

        On SQLite, foreign keys are off while migrations run (a table rebuilt in batch mode is
        dropped and copied, and the drop must not cascade), then checked and turned back on. The
        pragma only takes effect outside a transaction, hence the order."""
        with self.engine.connect() as connection:
            if self.dialect == "sqlite":
                connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
                connection.commit()
            with connection.begin():
                cfg = Config()
                cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
                cfg.attributes["connection"] = connection
                command.upgrade(cfg, "head")
            if self.dialect == "sqlite":
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                connection.commit()
                if broken:
                    raise RuntimeError(f"the migration left rows pointing at nothing: {broken[:5]}")

    def listen_to_writes(self, name: str, fn: Any) -> None:
        """Listen to an event of every write session (sqlalchemy.orm.SessionEvents), e.g. to learn
        which rows each committed transaction changed. Whoever listens stops (stop_listening_to_writes)
        when it is done with this database: a listener outlives its owner otherwise."""
        event.listen(self._sessions, name, fn)

    def stop_listening_to_writes(self, name: str, fn: Any) -> None:
        """Undo listen_to_writes(name, fn); a listener not (or no longer) there is left alone."""
        if event.contains(self._sessions, name, fn):
            event.remove(self._sessions, name, fn)

    def ping(self) -> bool:
        try:
            with self.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            return True
        except Exception:
            return False

    def connections_in_use(self) -> int:
        """How many of the pools' connections are checked out now."""
        engines = [self.engine] + ([self._read_engine] if self._read_engine is not None else [])
        return sum(getattr(e.pool, "checkedout", lambda: 0)() for e in engines)

    def dispose(self) -> None:
        self.engine.dispose()
        if self._read_engine is not None:
            self._read_engine.dispose()
