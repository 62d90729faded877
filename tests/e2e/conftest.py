"""End-to-end fixtures: every test runs on SQLite and on PostgreSQL, against a real cluster."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.determined_client import det_runner, determined_env
from tests.support.cluster import TestCluster, running_cluster
from tests.support.databases import BACKENDS, fresh_database
from tests.support.docker_env import task_image  # noqa: F401 (the Docker tests' fixture)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with two CPU slots."""
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=2) as c:
        yield c


@pytest.fixture
def det(cluster: TestCluster, tmp_path: Path) -> Callable[..., str]:
    """The stock `det` CLI, logged in as the non-admin user "determined"."""
    return det_runner(determined_env(cluster, tmp_path / "home"))


@pytest.fixture
def pid_dir() -> Iterator[Path]:
    """A folder trial code writes its pid files into for the test to read. Not under /tmp: an
    isolated trial has a /tmp of its own (services/agent/runtime/private_mounts.py), and runs
    as the task user, who may write here (sticky, like /tmp) but reaches no pytest folder (0700)."""
    path = Path(tempfile.mkdtemp(prefix="cairn-e2e-pids-", dir="/var/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def trial_dir() -> Path:
    return FIXTURES / "trial"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
