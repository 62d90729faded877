"""The REST API of a real cluster, as Determined's clients and a browser use it: login with the
salted hash and the session cookie, experiments created and listed over HTTP, a trial's logs
followed as an NDJSON stream until the trial ends, errors in the shape clients parse."""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from cairn.client.password import salt_and_hash
from tests.e2e.helpers import config
from tests.support.cluster import TestCluster
from tests.support.polling import wait_for

TIMEOUT = (10, 60)  # connect, read


def base_url(cluster: TestCluster) -> str:
    assert cluster.record is not None and cluster.record.master_http_url
    return cluster.record.master_http_url.rstrip("/")


def rest_login(
    base: str, session: requests.Session | None = None, username: str = "determined"
) -> requests.Response:
    client = session or requests.Session()
    response = client.post(
        f"{base}/api/v1/auth/login",
        json={"username": username, "password": salt_and_hash(""), "isHashed": True},
        timeout=TIMEOUT,
    )
    assert response.status_code == 200, response.text
    return response


def model_definition(directory: Path) -> list[dict[str, Any]]:
    """The context directory as Determined's client sends it: one entry per file, content base64."""
    files = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        info = path.stat()
        files.append(
            {
                "path": str(path.relative_to(directory)),
                "type": ord("0"),
                "content": base64.b64encode(path.read_bytes()).decode(),
                "mtime": int(info.st_mtime),
                "mode": stat.S_IMODE(info.st_mode),
                "uid": 0,
                "gid": 0,
            }
        )
    return files


def create_experiment(session: requests.Session, base: str, trial_dir: Path, **overrides: Any) -> int:
    body: dict[str, Any] = {
        "config": config(**overrides),
        "modelDefinition": model_definition(trial_dir),
        "activate": True,
    }
    response = session.post(f"{base}/api/v1/experiments", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return int(response.json()["experiment"]["id"])


def ndjson(lines: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.strip()]


def test_login_cookie_and_auth_errors(cluster: TestCluster) -> None:
    base = base_url(cluster)
    anonymous = requests.get(f"{base}/api/v1/master", timeout=TIMEOUT)
    assert anonymous.status_code == 200
    assert anonymous.json()["clusterId"] and anonymous.json()["product"] == "PRODUCT_COMMUNITY"

    refused = requests.get(f"{base}/api/v1/experiments", timeout=TIMEOUT)
    assert refused.status_code == 401
    body = refused.json()
    assert body["error"]["reason"] == "Unauthenticated" and body["code"] == 16
    assert body["error"]["error"] == body["message"] and "credentials" in body["message"]

    wrong = requests.post(
        f"{base}/api/v1/auth/login",
        json={"username": "determined", "password": salt_and_hash("not it"), "isHashed": True},
        timeout=TIMEOUT,
    )
    assert wrong.status_code in (401, 403) and "Set-Cookie" not in wrong.headers

    login = rest_login(base)
    token = login.json()["token"]
    assert login.json()["user"]["username"] == "determined"
    assert login.headers["Set-Cookie"].startswith(f"auth={token};")

    cookie_only = requests.Session()
    cookie_only.cookies.set("auth", token)
    me = cookie_only.get(f"{base}/api/v1/me", timeout=TIMEOUT)
    assert me.status_code == 200 and me.json()["user"]["username"] == "determined"

    bearer = requests.get(
        f"{base}/api/v1/auth/user", headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT
    )
    assert bearer.status_code == 200 and bearer.json()["user"]["username"] == "determined"

    logout = cookie_only.post(f"{base}/api/v1/auth/logout", timeout=TIMEOUT)
    assert logout.status_code == 200 and "Max-Age=0" in logout.headers["Set-Cookie"]
    stale = requests.get(f"{base}/api/v1/me", headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT)
    assert stale.status_code == 401


def test_an_experiment_over_rest_with_followed_logs(cluster: TestCluster, trial_dir: Path) -> None:
    base = base_url(cluster)
    session = requests.Session()
    token = rest_login(base, session).json()["token"]
    session.headers["Authorization"] = f"Bearer {token}"

    experiment_id = create_experiment(session, base, trial_dir, hyperparameters={"steps": 6, "step_s": 0.2})
    listing = session.get(
        f"{base}/api/v1/experiments",
        params=[
            ("states", "STATE_ACTIVE"),
            ("states", "STATE_COMPLETED"),
            ("orderBy", "ORDER_BY_DESC"),
            ("limit", 10),
        ],
        timeout=TIMEOUT,
    )
    assert listing.status_code == 200
    assert experiment_id in [e["id"] for e in listing.json()["experiments"]]
    none_paused = session.get(f"{base}/api/v1/experiments?states=STATE_PAUSED", timeout=TIMEOUT)
    assert none_paused.json()["experiments"] == [] and none_paused.json()["pagination"]["total"] == 0

    def first_trial() -> int | None:
        trials = session.get(f"{base}/api/v1/experiments/{experiment_id}/trials", timeout=TIMEOUT).json()[
            "trials"
        ]
        return int(trials[0]["id"]) if trials else None

    trial_id = wait_for(first_trial, timeout=30, what="the experiment's trial")

    # Follow the logs while the trial runs: the stream ends on its own when the trial does.
    started = time.monotonic()
    messages: list[str] = []
    with session.get(
        f"{base}/api/v1/trials/{trial_id}/logs", params={"follow": "true"}, stream=True, timeout=(10, 120)
    ) as stream:
        assert stream.status_code == 200 and stream.headers["Content-Type"] == "application/json"
        for line in stream.iter_lines():
            entry = json.loads(line)
            assert "error" not in entry, entry
            messages.append(entry["result"]["message"])
            assert time.monotonic() - started < 150, "the followed stream did not end with the trial"
    ledger = [m.split() for m in messages if m.startswith("LEDGER training")]
    assert [int(parts[2]) for parts in ledger] == list(range(1, 7))

    def state() -> str:
        return str(
            session.get(f"{base}/api/v1/experiments/{experiment_id}", timeout=TIMEOUT).json()["experiment"][
                "state"
            ]
        )

    wait_for(lambda: state() == "STATE_COMPLETED", timeout=60, what="the experiment to complete")

    metrics = session.get(
        f"{base}/api/v1/trials/metrics/trial_metrics",
        params={"trialIds": str(trial_id), "group": "training"},
        timeout=TIMEOUT,
    )
    reports = [m for line in ndjson(metrics.text.splitlines()) for m in line["result"]["metrics"]]
    assert sorted(r["totalBatches"] for r in reports) == list(range(1, 7))
    assert all(r["trialId"] == trial_id and r["group"] == "training" for r in reports)

    missing = session.get(f"{base}/api/v1/experiments/987654", timeout=TIMEOUT)
    assert missing.status_code == 404
    assert missing.json()["error"]["reason"] == "NotFound" and "987654" in missing.json()["error"]["error"]
    missing_logs = session.get(f"{base}/api/v1/trials/987654/logs", timeout=TIMEOUT)
    assert missing_logs.status_code == 404 and missing_logs.json()["code"] == 5

    pretty = session.get(f"{base}/api/v1/experiments/{experiment_id}?pretty", timeout=TIMEOUT)
    assert (
        pretty.text.startswith('{\n  "experiment": {') and pretty.json()["experiment"]["id"] == experiment_id
    )

    bad = session.get(f"{base}/api/v1/experiments?limit=lots", timeout=TIMEOUT)
    assert bad.status_code == 400 and "limit" in bad.json()["error"]["error"]

    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    result = subprocess.run(
        [
            curl,
            "-sN",
            "-H",
            f"Authorization: Bearer {token}",
            f"{base}/api/v1/trials/{trial_id}/logs?limit=5",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "NO_PROXY": "*"},
    )
    lines = result.stdout.splitlines()
    assert len(lines) == 5 and all(set(json.loads(line)) == {"result"} for line in lines)
