"""Resource pools bound to workspaces, with the stock `det rp bindings` and SDK on a cluster of one
agent and one slot: only an admin binds, the default pool cannot be bound, a bound pool takes new
experiments only from its workspaces (refused naming the pool and the workspace, nothing created),
the workspaces' available pools and the unbound pools are as Determined lists them, and the
bindings outlive a master restart and go with their workspace. Judged by end state: `det` exits 0
after many failures."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn.api.v1 import experiment_pb2
from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.e2e.helpers import wait_state
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

FIXTURES = Path(__file__).parent / "fixtures"
DET_TRIAL_DIR = FIXTURES / "det_trial"


@pytest.fixture
def two_pool_cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot in the default pool, and a second pool, `gpus`, with no agent yet."""
    config = tmp_path / "master.yaml"
    config.write_text("resource_pools:\n  - pool_name: default\n  - pool_name: gpus\n")
    with running_cluster(
        tmp_path / "cluster", db_url, agents=1, slots=1, extra_env={"CAIRN_MASTER_CONFIG": str(config)}
    ) as cluster:
        yield cluster


def _experiment_config(tmp_path: Path, workspace: str, project: str) -> Path:
    path = tmp_path / f"{workspace}.yaml"
    path.write_text(
        f"""
name: bound-{workspace}
workspace: {workspace}
project: {project}
entrypoint: python3 det_core_trial.py
hyperparameters: {{steps: 4, step_s: 0.05, increment_by: 1}}
searcher: {{name: single, metric: x, smaller_is_better: false, max_length: {{batches: 4}}}}
resources: {{resource_pool: gpus}}
max_restarts: 0
"""
    )
    return path


def _bound_names(det: Callable[..., str], pool: str) -> str:
    """The workspaces column of `det rp bindings list-workspaces POOL`."""
    text = det("rp", "bindings", "list-workspaces", pool)
    (row,) = [line for line in text.splitlines() if line.strip().startswith(pool)]
    return row.split("|", 1)[1].strip()


def test_bound_pools_take_work_only_from_their_workspaces(
    two_pool_cluster: TestCluster, tmp_path: Path
) -> None:
    env = determined_env(two_pool_cluster, tmp_path / "home")
    admin, user = det_runner(env, "admin"), det_runner(env)
    sdk = sdk_runner(env, "admin")
    for workspace in ("Team", "Other"):
        admin("workspace", "create", workspace)
        admin("project", "create", workspace, "p")
    ids = {w["name"]: w["id"] for w in json.loads(admin("workspace", "list", "--json"))}

    # Refusals change nothing: the default pool, a pool the config lacks, a missing workspace, a
    # user who is not an admin.
    assert "default resource pool default cannot be bound to any workspace" in admin(
        "rp", "bindings", "add", "default", "Team", check=False
    )
    assert "pool with name 'tpu' doesn't exist in config" in admin(
        "rp", "bindings", "add", "tpu", "Team", check=False
    )
    assert "workspace 'Nowhere' not found" in admin("rp", "bindings", "add", "gpus", "Nowhere", check=False)
    assert "only an admin" in user("rp", "bindings", "add", "gpus", "Team", check=False)
    assert _bound_names(admin, "gpus") == ""

    admin("rp", "bindings", "add", "gpus", "Team")
    assert _bound_names(user, "gpus") == "Team"  # anyone may list them
    available = sdk(
        "sess = client._determined._session\n"
        f"team = bindings.get_ListRPsBoundToWorkspace(sess, workspaceId={ids['Team']}).resourcePools\n"
        f"other = bindings.get_ListRPsBoundToWorkspace(sess, workspaceId={ids['Other']}).resourcePools\n"
        "unbound = [p.name for p in bindings.get_GetResourcePools(sess, unbound=True).resourcePools]\n"
        "result = {'team': team, 'other': other, 'unbound': unbound}\n"
    )
    assert available == {"team": ["default", "gpus"], "other": ["default"], "unbound": ["default"]}

    # An experiment of another workspace is refused in the bound pool, naming both; none is created.
    refused = admin(
        "experiment",
        "create",
        str(_experiment_config(tmp_path, "Other", "p")),
        str(DET_TRIAL_DIR),
        check=False,
    )
    assert "resource pool 'gpus' is bound to other workspaces, not to workspace 'Other'" in refused
    api = two_pool_cluster.login()
    assert list(api.GetExperiments(experiment_pb2.GetExperimentsRequest()).experiments) == []
    # The bound workspace's experiment is accepted (the pool has no agent yet: it waits), then killed.
    created = admin(
        "experiment", "create", str(_experiment_config(tmp_path, "Team", "p")), str(DET_TRIAL_DIR)
    )
    experiment_id = int(created.split("Created experiment ")[1].split()[0])
    admin("experiment", "kill", str(experiment_id))
    wait_state(api, experiment_id, "CANCELED")

    # Kept across a master restart.
    two_pool_cluster.kill("master")
    two_pool_cluster.restart("master")
    assert _bound_names(admin, "gpus") == "Team"

    admin("rp", "bindings", "replace", "gpus", "Other")
    assert _bound_names(admin, "gpus") == "Other"
    assert "not bound to pool 'gpus'" in admin("rp", "bindings", "remove", "gpus", "Team", check=False)
    admin("rp", "bindings", "remove", "gpus", "Other")
    assert _bound_names(admin, "gpus") == ""

    # A binding goes with its workspace.
    admin("rp", "bindings", "add", "gpus", "Other")
    admin("workspace", "delete", "Other", "--yes")
    wait_for(
        lambda: _bound_names(admin, "gpus") == "", timeout=60, what="the binding to go with its workspace"
    )
    admin("experiment", "delete", str(experiment_id), "--yes")
