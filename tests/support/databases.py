"""The databases end-to-end tests run on: the embedded SQLite default and a real PostgreSQL.

PostgreSQL comes from CAIRN_TEST_PG_URL (a server URL; each test gets its own database on it) or
the local server over its socket (`make test` starts it). CAIRN_TEST_POSTGRES=skip leaves it out,
loudly, for machines where it cannot run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg2
import pytest
from psycopg2 import sql
from sqlalchemy.engine import make_url

BACKENDS = ("sqlite", "postgres")


def postgres_skipped() -> bool:
    return os.environ.get("CAIRN_TEST_POSTGRES") == "skip"


def _server_url() -> str:
    return os.environ.get("CAIRN_TEST_PG_URL") or "postgresql:///postgres"


@contextmanager
def fresh_database(backend: str, tmp_path: Path) -> Iterator[str | None]:
    """A database URL for one test (None: the master's embedded SQLite default)."""
    if backend == "sqlite":
        yield None
        return
    if postgres_skipped():
        pytest.skip("CAIRN_TEST_POSTGRES=skip: PostgreSQL tests are not run")
    server = make_url(_server_url())
    name = f"cairn_test_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(
        server.set(database="postgres")
        .render_as_string(hide_password=False)
        .replace("postgresql+psycopg2", "postgresql")
    )
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.close()
