"""A fresh in-process master domain per test, once on SQLite and once on a scratch PostgreSQL
database: every domain test here runs on both (`master`), since the two differ where the domain
leans on the database (isolation, ids, locks, JSON, ordering). `master_on_each_database` is the
same fixture under the name some tests use to say so. Each database starts from a migrated copy
(tests/support/databases.py), so a test pays milliseconds for its schema, not every migration."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import BACKENDS, fresh_database, migrated_sqlite
from tests.unit.master.domain.harness import Master


@pytest.fixture(params=BACKENDS)
def master(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Master]:
    if request.param == "sqlite":
        # Where the master keeps its database by default, so a test may start one there again.
        migrated_sqlite(tmp_path / "master" / "master.db")
    with fresh_database(request.param, tmp_path, migrated=True) as url:
        m = Master(tmp_path / "master", db_url=None if request.param == "sqlite" else url, migrated=True)
        try:
            yield m
        finally:
            m.close()


@pytest.fixture
def master_on_each_database(master: Master) -> Master:
    return master
