"""A fresh in-process master domain per test (`master`): on SQLite, and on a scratch PostgreSQL
database as well for the tests where the database matters, those that ask for
`master_on_each_database` or are marked `on_each_database` (a test, or a whole module's
`pytestmark`). Those are the tests whose SQL the two databases answer differently: ids and
sequences, locks and isolation between concurrent units, JSON as stored, set-based inserts,
ordering and paging, uniqueness as clients spell names, migrations, metric intake and reads,
deletion. The rest exercise the domain's own decisions over rows the ORM reads and writes alike on
both, and run on SQLite alone, which halves the time they took. Each database starts from a
migrated copy (tests/support/databases.py), so a test pays milliseconds for its schema, not every
migration."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import BACKENDS, fresh_database, migrated_sqlite
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


@pytest.fixture
def master(backend: str, tmp_path: Path) -> Iterator[Master]:
    if backend == "sqlite":
        # Where the master keeps its database by default, so a test may start one there again.
        migrated_sqlite(tmp_path / "master" / "master.db")
    with fresh_database(backend, tmp_path, migrated=True) as url:
        m = Master(tmp_path / "master", db_url=None if backend == "sqlite" else url, migrated=True)
        try:
            yield m
        finally:
            m.close()


@pytest.fixture
def master_on_each_database(master: Master) -> Master:
    """`master`, and the test runs on each database."""
    return master
