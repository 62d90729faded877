"""The audit trail end to end: changes made with the stock determined==0.38.1 client (log in,
create a user, create an experiment and kill it, a failed login) are read back with Cairn's CLI,
`cairn audit list --user X --since ...`, each with who made it, what it named, where from (the
HTTP client's address, not the gateway's) and how it ended; a user who is not an admin is refused
the trail, by the CLI and by REST (403, naming why), and changes nothing by asking. On a cluster
of one agent and one slot, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.determined_client import DET, det_runner, determined_env
from tests.e2e.helpers import cairn_cli, state
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

DET_TRIAL_DIR = Path(__file__).parent / "fixtures" / "det_trial"
PASSWORD = "Pw-Audited1"


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def _events(cairn: Any, *args: str) -> list[dict[str, Any]]:
    return list(json.loads(cairn("audit", "list", "--json", *args)).get("events", []))


def _find(events: list[dict[str, Any]], method: str, **fields: Any) -> dict[str, Any] | None:
    for event in events:
        if event["method"] == method and all(event.get(k) == v for k, v in fields.items()):
            return event
    return None


def test_changes_made_with_det_are_in_the_trail(cluster: TestCluster, tmp_path: Path) -> None:
    since = (datetime.now(UTC) - timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    env = determined_env(cluster, tmp_path / "home")
    det_admin = det_runner(env, "admin")
    det = det_runner(env, "determined")
    admin = cairn_cli(cluster, tmp_path / "cairn-admin", "admin")

    det_admin("user", "create", "auditee", "--password", PASSWORD)
    config = tmp_path / "audited.yaml"
    config.write_text(
        "name: audited\nentrypoint: python3 det_core_trial.py\n"
        "hyperparameters: {steps: 50, step_s: 0.05, increment_by: 1}\n"
        "searcher: {name: single, metric: x, smaller_is_better: false, max_length: {batches: 50}}\n"
    )
    created = det("experiment", "create", "--paused", str(config), str(DET_TRIAL_DIR))
    experiment_id = int(created.split("Created experiment ")[1].split()[0])
    det("experiment", "kill", str(experiment_id))
    api = cluster.login()
    wait_for(lambda: state(api, experiment_id) == "CANCELED" or None, timeout=60, what="killed")
    failed = subprocess.run(
        [str(DET), "-u", "auditee", "user", "login", "auditee"],
        env=env,
        input="not-the-password\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "auditee" in failed.stdout + failed.stderr or failed.returncode != 0

    # determined's changes, through det's REST calls: who, what, where from, how they ended.
    def determineds() -> list[dict[str, Any]] | None:
        found = _events(admin, "--user", "determined", "--since", since)
        return found if _find(found, "KillExperiment") else None

    mine = wait_for(determineds, timeout=30, what="determined's kill in the trail")
    create = _find(mine, "CreateExperiment", outcome="OK")
    assert create is not None, mine
    assert create["targets"]["experiment_id"] == str(experiment_id)
    assert (create["username"], create["actor"]) == ("determined", "user")
    assert (create["address"], create["transport"]) == ("127.0.0.1", "rest")
    assert create["route"] == "POST /api/v1/experiments"
    kill = _find(mine, "KillExperiment", outcome="OK")
    assert kill is not None and kill["targets"] == {"experiment_id": str(experiment_id)}
    assert _find(mine, "Login", outcome="OK", transport="rest") is not None
    assert all(e["username"] == "determined" for e in mine)
    assert all(e["method"] not in ("GetExperiment", "GetMe", "GetMaster") for e in mine)  # reads

    # The admin's: the user it created; and the failed login under the name given.
    admins = _events(admin, "--user", "admin", "--since", since, "--method", "PostUser")
    (post_user,) = admins
    assert post_user["targets"]["username"] == "auditee" and post_user["outcome"] == "OK"
    assert "user_id" in post_user["targets"]  # the created user's id, from the answer
    denied = wait_for(
        lambda: _events(admin, "--user", "auditee", "--outcome", "failed") or None,
        timeout=30,
        what="the failed login",
    )
    assert (denied[0]["method"], denied[0]["outcome"], denied[0]["actor"]) == (
        "Login",
        "UNAUTHENTICATED",
        "anonymous",
    )
    # The target filter and the table.
    assert [e["method"] for e in _events(admin, "--target", f"experiment_id={experiment_id}")][:2] == [
        "KillExperiment",
        "CreateExperiment",
    ]
    table = admin("audit", "list", "--user", "determined", "--since", "10m")
    assert "KillExperiment" in table and f"experiment_id={experiment_id}" in table
    assert "127.0.0.1 (rest)" in table


def test_the_trail_is_for_admins_only(cluster: TestCluster, tmp_path: Path) -> None:
    admin = cairn_cli(cluster, tmp_path / "cairn-admin", "admin")
    user = cairn_cli(cluster, tmp_path / "cairn-user", "determined")
    wait_for(lambda: _events(admin, "--method", "Login") or None, timeout=30, what="the logins recorded")
    before = _events(admin, "--limit", "1000")

    out = user("audit", "list", check=False)
    assert "only an admin may read the audit trail" in out, out
    assert cluster.record is not None and cluster.record.master_http_url
    base = cluster.record.master_http_url.rstrip("/")
    login = requests.post(
        f"{base}/api/v1/auth/login", json={"username": "determined", "password": ""}, timeout=30
    )
    token = login.json()["token"]
    refused = requests.get(
        f"{base}/api/v1/audit", headers={"Authorization": f"Bearer {token}"}, params={"limit": 5}, timeout=30
    )
    assert refused.status_code == 403, refused.text
    assert "only an admin may read the audit trail" in refused.json()["message"]
    assert requests.get(f"{base}/api/v1/audit", timeout=30).status_code == 401

    # Asking changed nothing: reads are not recorded, the trail is as it was (the admin's own
    # calls aside, which are reads too).
    after = _events(admin, "--limit", "1000")
    new = [e for e in after if e["id"] not in {b["id"] for b in before}]
    assert all(e["method"] == "Login" for e in new), new
    # Bad input is refused naming the field.
    bad = admin("audit", "list", "--target", "experiment 7", check=False)
    assert "target:" in bad, bad
