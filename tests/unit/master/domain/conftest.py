"""`master_on_each_database`: a fresh in-process master domain per test, once on SQLite and once on
a scratch PostgreSQL database (`master`, on SQLite alone, is tests/unit/master/conftest.py's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import BACKENDS, fresh_database
from tests.unit.master.domain.harness import Master


@pytest.fixture(params=BACKENDS)
def master_on_each_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Master]:
    with fresh_database(request.param, tmp_path) as url:
        m = Master(tmp_path / "master", db_url=url)
        try:
            yield m
        finally:
            m.close()
