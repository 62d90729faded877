"""The databases end-to-end tests run on: the embedded SQLite default and a real PostgreSQL.

PostgreSQL comes from CAIRN_TEST_PG_URL (a server URL; each test gets its own database on it) or
the local server over its socket (`make test` starts it). CAIRN_TEST_POSTGRES=skip leaves it out,
loudly, for machines where it cannot run.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from psycopg2 import sql
from sqlalchemy.engine import Engine, make_url

from cairn.localcluster.processes import is_running

BACKENDS = ("sqlite", "postgres")


def postgres_skipped() -> bool:
    return os.environ.get("CAIRN_TEST_POSTGRES") == "skip"


def _server_url() -> str:
    return os.environ.get("CAIRN_TEST_PG_URL") or "postgresql:///postgres"


def _admin_connection() -> Any:
    server = make_url(_server_url())
    admin = psycopg2.connect(
        server.set(database="postgres")
        .render_as_string(hide_password=False)
        .replace("postgresql+psycopg2", "postgresql")
    )
    admin.autocommit = True
    return admin


def _database_url(name: str) -> str:
    return make_url(_server_url()).set(database=name).render_as_string(hide_password=False)


@contextmanager
def fresh_database(backend: str, tmp_path: Path, *, migrated: bool = False) -> Iterator[str | None]:
    """A database URL for one test (None: the master's embedded SQLite default). `migrated`: the
    schema at the latest migration already, as a new master finds it: a copy of this process's
    template (SQLite), or one of this process's scratch databases put back as the template left it
    (PostgreSQL): see below."""
    if backend == "sqlite":
        yield migrated_sqlite(tmp_path / "master-db" / "master.db") if migrated else None
        return
    if postgres_skipped():
        pytest.skip("CAIRN_TEST_POSTGRES=skip: PostgreSQL tests are not run")
    if migrated:
        with _scratch_postgres() as url:
            yield url
        return
    name = f"cairn_test_{uuid.uuid4().hex[:12]}"
    admin = _admin_connection()
    try:
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield _database_url(name)
    finally:
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.close()


# Migrated databases to copy: one of each kind per test process, made on first use. Migrating a new
# database runs every migration (0.3 s); a copy of one that ran them costs a millisecond (a file) or
# 0.1 s (a PostgreSQL template), which is most of what an in-process domain test takes. Each process
# (pytest-xdist worker) has its own, so no clone ever races another's connection to its template.
_TEMPLATE_PREFIX = "cairn_template_"
_templates: dict[str, str] = {}


def migrated_sqlite(dest: Path) -> str:
    """The URL of an SQLite file at `dest` (created, or replaced: no connection may be open to it)
    holding the migrated schema."""
    template = _templates.get("sqlite")
    if template is None:
        folder = Path(tempfile.mkdtemp(prefix="cairn-template-"))
        atexit.register(shutil.rmtree, folder, True)
        template = str(folder / "template.db")
        _migrate(f"sqlite:///{template}")
        _templates["sqlite"] = template
    dest.parent.mkdir(parents=True, exist_ok=True)
    # A copy over a database used before (a test process's own, reused test after test) must not
    # meet its old write-ahead log: SQLite would replay it onto the copy.
    for journal in ("-wal", "-shm", "-journal"):
        dest.with_name(dest.name + journal).unlink(missing_ok=True)
    shutil.copyfile(template, dest)
    dest.chmod(0o600)
    return f"sqlite:///{dest}"


# A connection to this process's SQLite template, kept to restore databases from (restore_sqlite).
_template_connections: list[sqlite3.Connection] = []


def restore_sqlite(engine: Engine) -> None:
    """Put the SQLite database of `engine` back as the migrated template holds it, in place, over
    one of the engine's own pooled connections (SQLite's online backup: every page replaced in one
    locked step), so that its pool's connections stay open. Replacing the file instead (as
    migrated_sqlite does) strands them: each test paid a pool's new connections, their pragmas and
    the disposal of the old ones, 4-5 ms of a short test. No connection of the engine may be in
    use; migrated_sqlite must have made the template."""
    if not _template_connections:
        # Only ever read, under the backup's lock, and only by this process's tests' thread.
        _template_connections.append(sqlite3.connect(_templates["sqlite"], check_same_thread=False))
    with engine.connect() as connection:
        _template_connections[0].backup(connection.connection.driver_connection)


def _postgres_template(admin: Any) -> str:
    template = _templates.get("postgres")
    if template is None:
        _drop_orphaned_templates(admin)
        template = f"{_TEMPLATE_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(template)))
        _migrate(_database_url(template))
        atexit.register(_drop_database, template)
        _templates["postgres"] = template
    return template


# PostgreSQL: a CREATE DATABASE ... TEMPLATE and its DROP cost the server ~0.1 s a test, most of a
# domain test's time there. So each test process keeps scratch databases, cloned from its template
# once, and a test's scratch database is put back as the template left it when the test is done:
# the test's connections ended, the rows of every table that has any deleted (children first), the
# template's own rows (the built-in workspace, project and accounts) copied back, and every
# sequence set back, so ids start where a new database's do. All of it in one transaction without
# waiting for its commit to reach the disk (a test database need not survive a crash), over a
# connection the test process keeps to each scratch database: about 3 ms, where a new database
# took 100 and a reset statement by statement, each its own commit, took 25.
_SCRATCH_PREFIX = "cairn_scratch_"
_free_scratch: list[str] = []


@dataclass
class _Pristine:
    """What a database cloned from the template holds, to put a scratch database back to it."""

    tables: list[str]  # children before their parents: the order rows can be deleted in
    rows: dict[str, bytes]  # COPY text of the tables that have rows
    sequences: list[tuple[str, int, bool]]  # (name, last_value, is_called)

    def nonempty_query(self) -> sql.Composable:
        """The tables that hold rows, in one statement (an empty table costs it a page read)."""
        return sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {} WHERE EXISTS (SELECT 1 FROM {})").format(sql.Literal(t), sql.Identifier(t))
            for t in self.tables
        )

    def setval_query(self) -> sql.Composable | None:
        """Every sequence set back, in one statement."""
        if not self.sequences:
            return None
        return sql.SQL("SELECT {}").format(
            sql.SQL(", ").join(
                sql.SQL("setval({}, {}, {})").format(sql.Literal(n), sql.Literal(v), sql.Literal(called))
                for n, v, called in self.sequences
            )
        )


# The application_name of the connections a test process keeps from one test to the next (the
# domain tests' pools): the reset leaves them connected while they are idle. Every other connection
# to a scratch database is ended when its test is done.
KEPT_POOL = "cairn-test-kept-pool"


def kept_pool_url(url: str) -> str:
    """`url` for a pool whose idle connections outlive the test (PostgreSQL only)."""
    return (
        make_url(url).update_query_dict({"application_name": KEPT_POOL}).render_as_string(hide_password=False)
    )


_pristine: list[_Pristine] = []
# The connection this process resets each scratch database over, by name: kept between tests.
_reset_connections: dict[str, Any] = {}


@contextmanager
def _scratch_postgres() -> Iterator[str]:
    name = _free_scratch.pop() if _free_scratch else _new_scratch()
    try:
        yield _database_url(name)
    finally:
        try:
            _reset_scratch(name)
        except psycopg2.Error:
            _drop_database(name)  # not put back: a later test gets a new one
        else:
            _free_scratch.append(name)


def _new_scratch() -> str:
    admin = _admin_connection()
    try:
        template = _postgres_template(admin)
        name = f"{_SCRATCH_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with admin.cursor() as cursor:
            cursor.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            )
    finally:
        admin.close()
    atexit.register(_drop_database, name)
    if not _pristine:
        _pristine.append(_read_pristine(name))
    return name


def _connect(name: str) -> Any:
    connection = psycopg2.connect(_database_url(name).replace("postgresql+psycopg2", "postgresql"))
    connection.autocommit = True
    return connection


def _read_pristine(name: str) -> _Pristine:
    connection = _connect(name)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> 'alembic_version'"
            )
            tables = sorted(row[0] for row in cursor.fetchall())
            cursor.execute(
                "SELECT child.relname, parent.relname FROM pg_constraint k "
                "JOIN pg_class child ON child.oid = k.conrelid "
                "JOIN pg_class parent ON parent.oid = k.confrelid "
                "WHERE k.contype = 'f' AND child.relname <> parent.relname"
            )
            parents: dict[str, set[str]] = {t: set() for t in tables}
            for child, parent in cursor.fetchall():
                parents.setdefault(child, set()).add(parent)
            rows: dict[str, bytes] = {}
            for table in tables:
                cursor.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(table)))
                if cursor.fetchone()[0]:
                    buffer = io.BytesIO()
                    cursor.copy_expert(sql.SQL("COPY {} TO STDOUT").format(sql.Identifier(table)), buffer)
                    rows[table] = buffer.getvalue()
            cursor.execute(
                "SELECT sequencename, COALESCE(last_value, start_value), last_value IS NOT NULL "
                "FROM pg_sequences WHERE schemaname = 'public'"
            )
            sequences = [(n, int(v), bool(called)) for n, v, called in cursor.fetchall()]
    finally:
        connection.close()
    return _Pristine(tables=_children_first(parents), rows=rows, sequences=sequences)


def _children_first(parents: dict[str, set[str]]) -> list[str]:
    """Tables ordered so that each comes before every table it references."""
    order: list[str] = []
    placed: set[str] = set()
    referenced_by: dict[str, set[str]] = {t: set() for t in parents}
    for child, ps in parents.items():
        for parent in ps:
            referenced_by.setdefault(parent, set()).add(child)
    pending = sorted(referenced_by)
    while pending:
        ready = [t for t in pending if referenced_by[t] <= placed]
        if not ready:
            raise RuntimeError(f"foreign keys in a cycle among {pending}: a scratch database cannot be reset")
        order.extend(ready)
        placed.update(ready)
        pending = [t for t in pending if t not in placed]
    return order


def _reset_scratch(name: str) -> None:
    """Puts `name` back as the template left it; once more over a new connection where the kept one
    was lost (a test may end every connection to its database)."""
    try:
        _reset_over(_reset_connection(name), name)
    except (psycopg2.OperationalError, psycopg2.InterfaceError):
        _forget_reset_connection(name)
        _reset_over(_reset_connection(name), name)


def _reset_connection(name: str) -> Any:
    connection = _reset_connections.get(name)
    if connection is None or connection.closed:
        connection = _reset_connections[name] = _connect(name)
    return connection


def _forget_reset_connection(name: str) -> None:
    connection = _reset_connections.pop(name, None)
    if connection is not None:
        with contextlib.suppress(psycopg2.Error):
            connection.close()


def _reset_over(connection: Any, name: str) -> None:
    pristine = _pristine[0]
    with connection.cursor() as cursor:
        # What the test left connected (a master's pools, a thread's session) must not hold a lock
        # the reset waits for, nor see the next test's rows. A kept pool's idle connections stay
        # (KEPT_POOL): they hold no lock and no snapshot, and a new connection costs a backend's
        # start and a cold catalog cache, most of what a short test on PostgreSQL took.
        cursor.execute(
            "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a "
            "WHERE a.datname = %s AND a.pid <> pg_backend_pid() AND ("
            " a.application_name IS DISTINCT FROM %s OR a.state IS DISTINCT FROM 'idle'"
            " OR EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory'))",
            (name, KEPT_POOL),
        )
        cursor.execute("BEGIN")
        try:
            cursor.execute("SET LOCAL synchronous_commit = off")
            cursor.execute(pristine.nonempty_query())
            holding = {row[0] for row in cursor.fetchall()}
            filled = [table for table in pristine.tables if table in holding]
            if filled:
                cursor.execute(
                    sql.SQL("; ").join(sql.SQL("DELETE FROM {}").format(sql.Identifier(t)) for t in filled)
                )
            for table in reversed(pristine.tables):  # parents first
                if table in pristine.rows:
                    cursor.copy_expert(
                        sql.SQL("COPY {} FROM STDIN").format(sql.Identifier(table)),
                        io.BytesIO(pristine.rows[table]),
                    )
            setvals = pristine.setval_query()
            if setvals is not None:
                cursor.execute(setvals)
            cursor.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(psycopg2.Error):
                cursor.execute("ROLLBACK")
            raise


def _migrate(url: str) -> None:
    """The schema at the latest migration, with the built-in accounts every master creates at its
    start (their password hash alone costs a test 30 ms)."""
    from services.master.domain.identity.auth import AuthService
    from services.master.store.db import Database

    db = Database(url)
    try:
        db.migrate()
        AuthService(db, 3600).ensure_builtin_users()
    finally:
        db.dispose()  # a template takes no clone while a connection to it is open


def _drop_database(name: str) -> None:
    _forget_reset_connection(name)
    with contextlib.suppress(psycopg2.Error):
        admin = _admin_connection()
        try:
            with admin.cursor() as cursor:
                cursor.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
        finally:
            admin.close()


def _drop_orphaned_templates(admin: Any) -> None:
    """Templates left by test processes that died before their exit handler ran."""
    with admin.cursor() as cursor:
        cursor.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s OR datname LIKE %s",
            (_TEMPLATE_PREFIX + "%", _SCRATCH_PREFIX + "%"),
        )
        names = [row[0] for row in cursor.fetchall()]
    for name in names:
        pid = name.removeprefix(_TEMPLATE_PREFIX).removeprefix(_SCRATCH_PREFIX).split("_")[0]
        if pid.isdigit() and not is_running(int(pid)):
            with admin.cursor() as cursor:
                cursor.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
