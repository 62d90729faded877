"""Image pull settings on a TensorBoard with the stock `det tensorboard start --config ...` on a
process-runtime cluster of one agent and one slot: accepted in Docker's shape (the TensorBoard
serves, and its log says the process runtime runs no image and leaves them aside), refused naming
the field otherwise, as Determined checks them. (The Docker runtime honours them:
test_e2e_docker_runtime.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.determined_client import det_runner, determined_env
from tests.e2e.helpers import wait_state
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

DET_TRIAL_DIR = Path(__file__).parent / "fixtures" / "det_trial"


@pytest.fixture
def one_slot_cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def test_a_tensorboards_pull_settings_are_checked_and_noted(
    one_slot_cluster: TestCluster, tmp_path: Path
) -> None:
    det = det_runner(determined_env(one_slot_cluster, tmp_path / "home"))
    config = tmp_path / "experiment.yaml"
    config.write_text(
        "entrypoint: python3 det_core_trial.py\n"
        "hyperparameters: {steps: 2, step_s: 0.01, increment_by: 1}\n"
        "searcher: {name: single, metric: x, smaller_is_better: false, max_length: {batches: 2}}\n"
        "max_restarts: 0\n"
    )
    det("experiment", "create", str(config), str(DET_TRIAL_DIR))
    wait_state(one_slot_cluster.login(), 1, "COMPLETED", timeout=180)

    for setting, field in (
        ("environment.registry_auth.user=u", "config.environment.registry_auth.user"),
        ("environment.force_pull_image=sometimes", "config.environment.force_pull_image"),
    ):
        refused = det("tensorboard", "start", "1", "--no-browser", "--config", setting, check=False)
        assert field in refused, refused
    assert json.loads(det("tensorboard", "list", "--json")) == []  # nothing was stored

    out = det(
        "tensorboard",
        "start",
        "1",
        "--no-browser",
        "--config",
        "environment.force_pull_image=true",
        "--config",
        "environment.registry_auth.username=u",
        "--config",
        "environment.registry_auth.serveraddress=registry.example",
    )
    assert "Tensorboard is running at" in out
    (listed,) = json.loads(det("tensorboard", "list", "--json"))
    task_id = listed["id"]
    assert "runs no image" in det("task", "logs", task_id)
    det("tensorboard", "kill", task_id)
    wait_for(
        lambda: json.loads(det("tensorboard", "list", "--json"))[0]["state"] == "TERMINATED",
        timeout=90,
        what=f"TensorBoard {task_id} to end",
    )
