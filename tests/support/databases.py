"""The databases end-to-end tests run on: the embedded SQLite default and a real PostgreSQL.

PostgreSQL comes from CAIRN_TEST_PG_URL (a server URL; each test gets its own database on it) or
the local server over its socket (`make test` starts it). CAIRN_TEST_POSTGRES=skip leaves it out,
loudly, for machines where it cannot run.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from psycopg2 import sql
from sqlalchemy.engine import make_url

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
    schema at the latest migration already, copied from this process's template (see below), so the
    test pays a file copy or a CREATE DATABASE ... TEMPLATE instead of every migration."""
    if backend == "sqlite":
        yield migrated_sqlite(tmp_path / "master-db" / "master.db") if migrated else None
        return
    if postgres_skipped():
        pytest.skip("CAIRN_TEST_POSTGRES=skip: PostgreSQL tests are not run")
    name = f"cairn_test_{uuid.uuid4().hex[:12]}"
    admin = _admin_connection()
    try:
        with admin.cursor() as cursor:
            if migrated:
                cursor.execute(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                        sql.Identifier(name), sql.Identifier(_postgres_template(admin))
                    )
                )
            else:
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
    """The URL of an SQLite file at `dest` (created) holding the migrated schema."""
    template = _templates.get("sqlite")
    if template is None:
        folder = Path(tempfile.mkdtemp(prefix="cairn-template-"))
        atexit.register(shutil.rmtree, folder, True)
        template = str(folder / "template.db")
        _migrate(f"sqlite:///{template}")
        _templates["sqlite"] = template
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, dest)
    dest.chmod(0o600)
    return f"sqlite:///{dest}"


def _postgres_template(admin: Any) -> str:
    template = _templates.get("postgres")
    if template is None:
        _drop_orphaned_templates(admin)
        template = f"{_TEMPLATE_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(template)))
        _migrate(_database_url(template))
        atexit.register(_drop_template, template)
        _templates["postgres"] = template
    return template


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


def _drop_template(name: str) -> None:
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
        cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (_TEMPLATE_PREFIX + "%",))
        names = [row[0] for row in cursor.fetchall()]
    for name in names:
        pid = name.removeprefix(_TEMPLATE_PREFIX).split("_")[0]
        if pid.isdigit() and not _alive(int(pid)):
            with admin.cursor() as cursor:
                cursor.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
