"""A fresh in-process master domain per test (SQLite in the test's folder), for every test here
that asks for `master` (tests/unit/master/domain/conftest.py adds one per database)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.master.domain.harness import Master


@pytest.fixture
def master(tmp_path: Path) -> Iterator[Master]:
    m = Master(tmp_path / "master")
    try:
        yield m
    finally:
        m.close()
