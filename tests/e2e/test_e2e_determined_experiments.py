"""Experiment lifecycle details as Determined has them, driven with the stock client
(determined==0.38.1) on a cluster of one agent and one slot: an experiment asking for more slots
than the pool has is accepted with Determined's launch warning and waits, its reason shown in the
job queue, until it is killed; an agent reports the API level the master reports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

SLOTS_WARNING = "Warning: The requested job requires more slots than currently available."


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, as Determined's own suite runs."""
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def test_more_slots_than_the_pool_has_is_accepted_with_a_warning_and_waits(
    cluster: TestCluster, tmp_path: Path
) -> None:
    env = determined_env(cluster, tmp_path / "home")
    det = det_runner(env)
    sdk = sdk_runner(env)
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text("print('never here')\n")
    config = tmp_path / "wide.yaml"
    config.write_text(
        "name: wide\nentrypoint: python3 train.py\nresources: {slots_per_trial: 2}\n"
        "searcher: {name: single, metric: x, max_length: {batches: 1}}\n"
    )
    out = det("experiment", "create", str(config), str(context), check=False)  # with its stderr
    assert SLOTS_WARNING in out, out
    experiment_id = int(out.split("Created experiment ")[1].split()[0])

    def queued() -> dict[str, object] | None:
        jobs = json.loads(det("job", "list", "--json"))["jobs"]
        return next((j for j in jobs if j["type"] == "TYPE_EXPERIMENT"), None)

    job = wait_for(queued, timeout=60, what="the experiment's job in the queue")
    assert job["summary"]["state"] == "STATE_QUEUED", job
    state = sdk(f"result = client.get_experiment({experiment_id}).list_trials()[0].state.value")
    assert state == "STATE_QUEUED"  # stored ACTIVE, waiting for slots: Determined's derived state
    det("experiment", "kill", str(experiment_id))
    ended = sdk(f"result = client.get_experiment({experiment_id}).wait(interval=1).value")
    assert ended == "STATE_CANCELED"


def test_an_agent_reports_the_api_level_the_master_reports(cluster: TestCluster, tmp_path: Path) -> None:
    det = det_runner(determined_env(cluster, tmp_path / "home"))
    master_version = json.loads(det("master", "info", "--json"))["version"]
    (agent,) = json.loads(det("agent", "list", "--json"))
    assert agent["version"] == master_version == "0.38.1"
