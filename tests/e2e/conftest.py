"""End-to-end fixtures: every test runs against a real cluster, on one database or on each.

An end-to-end test runs on PostgreSQL, the database a shared cluster runs on (the Kubernetes
deployment, a standby master), or on SQLite where PostgreSQL is left out (CAIRN_TEST_POSTGRES=skip).
What the two databases answer differently (SQL dialects, ids and sequences, locks, JSON, paging,
migrations, metric intake) is the domain tests' subject, on each database
(tests/unit/master/domain/conftest.py); running every end-to-end test on both doubled the suite's
longest part for what those already check. The tests whose subject is the database's part in the
whole system, or the embedded SQLite a new user's local cluster starts on, are marked
`on_each_database` (a test, or its module's `pytestmark`) and run on both: a master recovering its
state after a restart or a handover, the CLI's walkthrough, the stock client's core flows.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from services.agent.runtime import private_mounts
from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.support.cluster import AuthedStub, TestCluster, running_cluster
from tests.support.databases import BACKENDS, fresh_database, postgres_skipped
from tests.support.docker_env import task_image  # noqa: F401 (the Docker tests' fixture)

FIXTURES = Path(__file__).parent / "fixtures"

# The one database an end-to-end test runs on unless it is marked `on_each_database`.
E2E_DATABASE = "sqlite" if postgres_skipped() else "postgres"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # The backend is a parameter of every test that gets a database, so its id names the database
    # either way (`-k sqlite`, `-k postgres` select by it).
    if "db_url" in metafunc.fixturenames:
        each = bool(metafunc.definition.get_closest_marker("on_each_database"))
        metafunc.parametrize("backend", BACKENDS if each else (E2E_DATABASE,), scope="function")


@pytest.fixture
def db_url(backend: str, tmp_path: Path) -> Iterator[str | None]:
    with fresh_database(backend, tmp_path) as url:
        yield url


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[TestCluster]:
    """One agent with two CPU slots; with the `one_slot` mark (a test's, or its module's
    `pytestmark`), one agent with one slot, as Determined runs its own e2e tests."""
    slots = 1 if request.node.get_closest_marker("one_slot") else 2
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=slots) as c:
        yield c


@pytest.fixture
def one_slot_sqlite_cluster(tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, on SQLite alone: for tests whose subject depends on no database
    (the WebUI's pages in the browser)."""
    with running_cluster(tmp_path / "cluster", None, agents=1, slots=1) as c:
        yield c


@pytest.fixture
def det_env(cluster: TestCluster, tmp_path: Path) -> dict[str, str]:
    """The environment the stock client runs in against `cluster` (its master, its own home)."""
    return determined_env(cluster, tmp_path / "home")


@pytest.fixture
def det(det_env: dict[str, str]) -> Callable[..., str]:
    """The stock `det` CLI, logged in as the non-admin user "determined"."""
    return det_runner(det_env)


@pytest.fixture
def det_admin(det_env: dict[str, str]) -> Callable[..., str]:
    """The stock `det` CLI as the admin."""
    return det_runner(det_env, "admin")


@pytest.fixture
def sdk(det_env: dict[str, str]) -> Callable[[str], Any]:
    """The stock Python SDK as the user "determined" (determined_client.sdk_runner)."""
    return sdk_runner(det_env)


@pytest.fixture
def api(cluster: TestCluster) -> AuthedStub:
    """Cairn's own API as the user "determined", to read end states back."""
    return cluster.login()


@pytest.fixture
def needs_private_mounts() -> None:
    """Skips the test (`@pytest.mark.usefixtures("needs_private_mounts")`, before its cluster
    starts) where the test cluster's agent could not make a task's private mounts (its /dev/shm,
    its absolute bind mounts): that needs root, unshare and mount."""
    if not private_mounts.supported():
        pytest.skip("the test cluster's agent needs root, unshare and mount for a task's private mounts")


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
