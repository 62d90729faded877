"""`resources.shm_size` on the process runtime, with the stock `det` on a cluster of one agent and
one slot: a command's /dev/shm is a tmpfs of the size asked (Determined's 4 GiB when unset), as
`df -B1 /dev/shm` sees it from inside the command."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.agent.runtime import private_mounts
from tests.support.cluster import TestCluster, running_cluster

pytestmark = pytest.mark.skipif(
    not private_mounts.supported(), reason="the test cluster's agent needs root for a private /dev/shm"
)


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def shm_bytes(output: str) -> int:
    (line,) = [x for x in output.splitlines() if x.startswith("tmpfs") and x.rstrip().endswith("/dev/shm")]
    return int(line.split()[1])


def test_a_commands_dev_shm_has_the_size_its_config_asks(det: Callable[..., str]) -> None:
    asked = det("cmd", "run", "--config", "resources.shm_size=256M", "df -B1 /dev/shm")
    assert shm_bytes(asked) == 256 << 20
    default = det("cmd", "run", "df -B1 /dev/shm")
    assert shm_bytes(default) == 4 << 30
