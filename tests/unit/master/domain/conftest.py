"""A fresh in-process master domain per test (SQLite in the test's folder; `master_on_each_database`:
once on SQLite and once on a scratch PostgreSQL database)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import BACKENDS, fresh_database
from tests.unit.master.domain.harness import Master


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    m = Master(tmp_path / "master")
    try:
        yield m
    finally:
        m.close()


@pytest.fixture(params=BACKENDS)
def master_on_each_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Master]:
    with fresh_database(request.param, tmp_path) as url:
        m = Master(tmp_path / "master", db_url=url)
        try:
            yield m
        finally:
            m.close()
