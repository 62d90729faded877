"""A master whose public port runs in two processes (`CAIRN_HTTP_PROCESSES=2`): every answer is the
same whichever process took the connection, the task proxy's refusals and /healthz and /metrics
included, which a worker process asks of the master's internal gateway service with the key the
master handed it on its stdin (a wrong key would make every one of them a 503)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from tests.e2e.test_e2e_rest import TIMEOUT, base_url, rest_login
from tests.support.cluster import TestCluster, running_cluster

# Fresh connections: the kernel hands each to whichever process accepts first, so a few dozen
# reach both (the master's own and the worker).
ROUNDS = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    state_dir = tmp_path_factory.mktemp("http-workers") / "cluster"
    with running_cluster(state_dir, None, agents=0, extra_env={"CAIRN_HTTP_PROCESSES": "2"}) as c:
        yield c


def test_every_process_answers_health_metrics_and_the_proxys_refusals(cluster: TestCluster) -> None:
    base = base_url(cluster)
    token = rest_login(base).json()["token"]
    close = {"Connection": "close"}
    for _ in range(ROUNDS):
        health = requests.get(f"{base}/healthz", headers=close, timeout=TIMEOUT)
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        metrics = requests.get(f"{base}/metrics", headers=close, timeout=TIMEOUT)
        assert metrics.status_code == 200 and "cairn_agents " in metrics.text
        anonymous = requests.get(f"{base}/proxy/no-such-task/", headers=close, timeout=TIMEOUT)
        assert anonymous.status_code == 401 and "authentication required" in anonymous.json()["error"]
        missing = requests.get(
            f"{base}/proxy/no-such-task/",
            headers={**close, "Authorization": f"Bearer {token}"},
            timeout=TIMEOUT,
        )
        assert missing.status_code == 404 and "no task that serves" in missing.json()["error"]
