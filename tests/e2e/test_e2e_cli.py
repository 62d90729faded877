"""The issue's acceptance walk-through, driven through the `cairn` command itself:
cluster up with two agents, agents and slots listed, login, create, list, a refused config,
and cluster down leaving no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.helpers import TRIAL_DIR, config
from tests.support.cluster import TestCluster, _processes_mentioning

CAIRN = [sys.executable, "-m", "cairn.cli.main"]


def run(
    args: list[str], env: dict[str, str], stdin: str = "", check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        CAIRN + args, env=env, input=stdin, capture_output=True, text=True, timeout=120, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"cairn {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


# A new user's walkthrough: the local cluster's embedded SQLite and a PostgreSQL given by --db-url.
@pytest.mark.on_each_database
def test_cluster_walkthrough_with_the_cli(tmp_path: Path, db_url: str | None) -> None:
    state_dir = tmp_path / "state"
    env = {
        **os.environ,
        "CAIRN_STATE_DIR": str(state_dir),
        "CAIRN_CONFIG_DIR": str(tmp_path / "config"),
        "CAIRN_MASTER": "",
    }
    up = ["cluster", "up", "--agents", "2", "--slots", "1", "--master-port", "0", "--http-port", "0"]
    if db_url:
        up += ["--db-url", db_url]
    run(up, env)
    try:
        record = json.loads((state_dir / "cluster.json").read_text())
        env["CAIRN_MASTER"] = record["master_grpc_address"]

        agents = json.loads(run(["agent", "list", "--json"], env).stdout)
        assert sorted(a["id"] for a in agents["agents"]) == ["agent-1", "agent-2"]
        assert all(len(a["slots"]) == 1 for a in agents["agents"])
        slots = run(["slot", "list"], env).stdout
        assert "agent-1" in slots and "agent-2" in slots

        assert (
            "determined" in run(["user", "login", "determined", "--password-stdin"], env, stdin="\n").stdout
        )
        assert "determined" in run(["user", "whoami"], env).stdout

        config_file = tmp_path / "exp.yaml"
        config_file.write_text(config(hyperparameters={"steps": 200, "step_s": 0.2}))
        created = run(["experiment", "create", str(config_file), str(TRIAL_DIR)], env).stdout
        assert "Created experiment 1" in created
        listed = json.loads(run(["experiment", "list", "--json"], env).stdout)
        # Stored ACTIVE, answered as its allocation's progress (Determined's derived state).
        assert [(e["id"], e["numTrials"]) for e in listed["experiments"]] == [(1, 1)]
        assert listed["experiments"][0]["state"] in (
            "STATE_QUEUED",
            "STATE_PULLING",
            "STATE_STARTING",
            "STATE_RUNNING",
        )

        bad = yaml.safe_load(config())
        bad["searcher"] = {"name": "random", "metric": "loss", "max_trials": -1}
        config_file.write_text(yaml.safe_dump(bad))
        refused = run(["experiment", "create", str(config_file), str(TRIAL_DIR)], env, check=False)
        assert refused.returncode != 0
        assert "searcher.max_trials: must be >= 1" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert json.loads(run(["experiment", "list", "--json"], env).stdout)["pagination"]["total"] == 1
        run(["experiment", "kill", "1"], env)
    finally:
        run(["cluster", "down"], env)
    assert not _processes_mentioning(str(state_dir)), "processes left behind after cluster down"


def test_follow_exit_codes_logs_and_download_with_the_cli(cluster: TestCluster, tmp_path: Path) -> None:
    env = {**os.environ, "CAIRN_MASTER": cluster.address, "CAIRN_CONFIG_DIR": str(tmp_path / "config")}
    run(["user", "login", "determined", "--password-stdin"], env, stdin="\n")
    config_file = tmp_path / "exp.yaml"

    config_file.write_text(config(hyperparameters={"steps": 4, "step_s": 0.2, "ckpt_every": 2}))
    followed = run(["experiment", "create", str(config_file), str(TRIAL_DIR), "--follow"], env)
    assert "COMPLETED" in followed.stdout
    logs = run(["trial", "logs", "1", "--follow"], env).stdout
    assert "DONE" in logs and "LEDGER training 4 1" in logs

    checkpoints = json.loads(run(["checkpoint", "list", "1", "--json"], env).stdout)["checkpoints"]
    assert checkpoints
    # GC-deleted ones are listed too (DELETED, as on Determined): download a kept one.
    uuid = next(c["uuid"] for c in checkpoints if c["state"] == "STATE_COMPLETED")
    run(["checkpoint", "download", uuid, str(tmp_path / "ckpt")], env)
    host_path = Path(
        json.loads(run(["experiment", "describe", "1", "--json"], env).stdout)["experiment"]["config"][
            "checkpoint_storage"
        ]["host_path"]
    )
    for name in ("state.json", "payload.bin", "metadata.json"):
        assert (tmp_path / "ckpt" / name).read_bytes() == (host_path / uuid / name).read_bytes()

    config_file.write_text(config(hyperparameters={"fail_always": True}))
    failed = run(["experiment", "create", str(config_file), str(TRIAL_DIR), "--follow"], env, check=False)
    assert failed.returncode == 1, failed.stdout + failed.stderr

    # Edits after creation: stored, and shown by describe.
    run(["experiment", "set", "name", "1", "renamed"], env)
    run(["experiment", "set", "description", "1", "a short run"], env)
    run(["experiment", "set", "notes", "1", "-"], env, stdin="# notes\n")
    run(["experiment", "label", "add", "1", "keep"], env)
    run(["experiment", "label", "add", "1", "drop"], env)
    run(["experiment", "label", "remove", "1", "drop"], env)
    run(["experiment", "set", "priority", "1", "7"], env)
    refused = run(["experiment", "set", "weight", "1", "0"], env, check=False)
    assert refused.returncode != 0 and "resources.weight" in refused.stderr
    described = json.loads(run(["experiment", "describe", "1", "--json"], env).stdout)
    stored = described["experiment"]
    assert (stored["name"], stored["description"], stored["labels"], stored["notes"]) == (
        "renamed",
        "a short run",
        ["keep"],
        "# notes\n",
    )
    assert described["config"]["resources"]["priority"] == 7
    assert described["config"]["resources"]["weight"] == 1
    # Nothing runs: the default pool's queue is empty.
    assert json.loads(run(["job", "list", "--json"], env).stdout) == {"jobs": []}
