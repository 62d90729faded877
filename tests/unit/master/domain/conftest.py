"""A fresh in-process master domain per test (`master`): on SQLite, and on a scratch PostgreSQL
database as well for the tests where the database matters, those that ask for
`master_on_each_database` or are marked `on_each_database` (a test, or a whole module's
`pytestmark`). Those are the tests whose SQL the two databases answer differently: ids and
sequences, locks and isolation between concurrent units, JSON as stored, set-based inserts,
ordering and paging, uniqueness as clients spell names, migrations, metric intake and reads,
deletion. The rest exercise the domain's own decisions over rows the ORM reads and writes alike on
both, and run on SQLite alone, which halves the time they took.

Each test's database starts from a migrated copy (tests/support/databases.py), so a test pays
milliseconds for its schema, not every migration. A test process keeps one database of each kind
and one `Database` for it, handed to each test's master: the rows are put back as the template
left them between tests, and the engines keep the statements SQLAlchemy compiled (compiling them
again for every test's new engine was a fifth of the tests' CPU). A master's close() stops its
listeners, so the next test's master finds the `Database` as new; its idle pooled connections are
kept for the next test: SQLite's database is restored under them from the template (a pool's new
connections cost a short test 4-5 ms), PostgreSQL's scratch database reset (a new backend and its
cold catalog cache cost a short test more than its own statements did)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from services.master.store.db import Database
from tests.support.databases import (
    BACKENDS,
    fresh_database,
    kept_pool_url,
    migrated_sqlite,
    restore_sqlite,
)
from tests.unit.master.domain.harness import Master

EACH_DATABASE = "master_on_each_database"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # The backend is a parameter of every test that gets a master, so its id names the database
    # either way (`-k sqlite`, `-k postgres` select by it).
    if "master" in metafunc.fixturenames:
        each = EACH_DATABASE in metafunc.fixturenames or bool(
            metafunc.definition.get_closest_marker("on_each_database")
        )
        metafunc.parametrize("backend", BACKENDS if each else ("sqlite",), scope="function")


# This test process's Database for each database URL it gave a master.
_databases: dict[str, Database] = {}


@pytest.fixture(scope="session")
def _sqlite_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this test process keeps its SQLite database, a fresh copy for each test."""
    return tmp_path_factory.mktemp("domain-sqlite")


@contextmanager
def _database_url(backend: str, sqlite_home: Path, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        dest = sqlite_home / "master.db"
        kept = _databases.get(f"sqlite:///{dest}")
        if kept is None:
            yield migrated_sqlite(dest)
        else:
            # Put back in place: the kept Database's pooled connections stay open.
            restore_sqlite(kept.engine)
            yield f"sqlite:///{dest}"
        return
    with fresh_database(backend, tmp_path, migrated=True) as url:
        assert url is not None
        yield url


@pytest.fixture
def master(backend: str, tmp_path: Path, _sqlite_home: Path) -> Iterator[Master]:
    with _database_url(backend, _sqlite_home, tmp_path) as url:
        db = _databases.get(url)
        if db is None:
            db = _databases[url] = Database(url if backend == "sqlite" else kept_pool_url(url))
        m = Master(tmp_path / "master", db_url=url, migrated=True, db=db)
        try:
            yield m
        finally:
            # Idle pooled connections stay for the next test: SQLite's database is restored under
            # them, PostgreSQL's scratch reset ends any that are not idle.
            m.close(keep_connections=True)


@pytest.fixture
def master_on_each_database(master: Master) -> Master:
    """`master`, and the test runs on each database."""
    return master
