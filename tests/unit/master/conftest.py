"""A fresh in-process master domain per test (SQLite in the test's folder, copied from a migrated
one), for every test here that asks for `master` (tests/unit/master/domain/conftest.py runs its
tests on each database)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import migrated_sqlite
from tests.unit.master.domain.harness import Master


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    migrated_sqlite(tmp_path / "master" / "master.db")  # where the master keeps it by default
    m = Master(tmp_path / "master", migrated=True)
    try:
        yield m
    finally:
        m.close()
