"""A cluster with TLS (`cairn cluster up --tls`, SQLite): the agent joins over TLS, a trial's Core
API reports metrics verifying the master's certificate, `cairn` works with the CA and fails
clearly without it, the stock `det` client works over HTTPS with DET_MASTER_CERT_FILE, and plain
HTTP to the HTTPS port is refused. A script written against Determined's Core API verifies the
master with the CA file its task is given (DET_MASTER_CERT_FILE)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from cairn.api.v1 import agent_pb2
from tests.e2e.determined_client import det_runner, determined_env
from tests.e2e.helpers import config, create, ledger, logs, stored_metrics, trials, wait_state
from tests.support.cluster import TestCluster, running_cluster

DET_TRIAL_DIR = Path(__file__).parent / "fixtures" / "det_trial"
DET_TRIAL_CONFIG = """
name: determined-core-api-tls
entrypoint: python3 det_core_trial.py
hyperparameters: {steps: 4, step_s: 0.05, increment_by: 2}
searcher: {name: single, metric: x, smaller_is_better: false, max_length: {batches: 4}}
max_restarts: 0
"""


@pytest.fixture
def tls_cluster(tmp_path: Path) -> Iterator[TestCluster]:
    with running_cluster(tmp_path / "cluster", None, agents=1, slots=1, tls=True) as cluster:
        yield cluster


def _cairn(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cairn.cli.main", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_tls_cluster_end_to_end(tls_cluster: TestCluster, tmp_path: Path) -> None:
    record = tls_cluster.record
    assert record is not None and record.master_ca_file and record.master_http_url
    ca_file = record.master_ca_file
    assert record.master_http_url.startswith("https://")

    # The agent joined over TLS (it verified the master with --master-cert) and offers its slot.
    api = tls_cluster.login()
    agents = api.GetAgents(agent_pb2.GetAgentsRequest()).agents
    assert [a.id for a in agents] == ["agent-1"] and len(agents[0].slots) == 1

    # A trial reports through the Core API: its channel verified the master with the CA the agent
    # handed it (CAIRN_MASTER_CERT_PEM); every report it made is stored.
    experiment_id = create(api, config())
    wait_state(api, experiment_id, "COMPLETED")
    (trial,) = trials(api, experiment_id)
    said = ledger(logs(api, trial.id))
    assert said["training"] and said["validation"]
    assert len(stored_metrics(api, trial.id, "training")) == len(said["training"])

    # A script written against Determined's own Core API (its tutorials' shape) verifies the master
    # with the CA file the agent gave it (DET_MASTER_CERT_FILE, as Determined's containers have it).
    det_id = create(api, DET_TRIAL_CONFIG, model_dir=DET_TRIAL_DIR)
    wait_state(api, det_id, "COMPLETED")
    (det_trial,) = trials(api, det_id)
    det_lines = logs(api, det_trial.id)
    assert any(line.startswith("DET-INFO") and "master=https://" in line for line in det_lines), det_lines
    validations = stored_metrics(api, det_trial.id, "validation")
    assert [(m.total_batches, m.metrics["avg_metrics"]["x"]) for m in validations] == [(2, 4.0), (4, 8.0)]

    # `cairn` with the CA: works. Without it, asked for TLS (grpcs://): a certificate error.
    env = {
        **os.environ,
        "CAIRN_MASTER": tls_cluster.address,
        "CAIRN_CONFIG_DIR": str(tmp_path / "cairn-home"),
        "CAIRN_MASTER_CERT": "",
        "CAIRN_MASTER_CERT_PEM": "",
    }
    login = _cairn(
        env, "--master-cert", ca_file, "user", "login", "determined", "--password-stdin", stdin="\n"
    )
    assert login.returncode == 0, login.stderr
    listed = _cairn({**env, "CAIRN_MASTER_CERT": ca_file}, "experiment", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert experiment_id in [int(e["id"]) for e in json.loads(listed.stdout)["experiments"]]
    untrusted = _cairn(env, "-m", f"grpcs://{tls_cluster.address}", "experiment", "list")
    assert untrusted.returncode != 0
    assert "certificate could not be verified" in untrusted.stderr, untrusted.stderr
    assert "--master-cert" in untrusted.stderr

    # The stock Determined client over HTTPS, trusting the CA through its own variable.
    det_env = {**determined_env(tls_cluster, tmp_path / "det-home"), "DET_MASTER_CERT_FILE": ca_file}
    # requests lets these variables override the CA bundle a client sets on its session, so where
    # the machine sets them (as CI images do) det would never use DET_MASTER_CERT_FILE.
    for variable in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        det_env.pop(variable, None)
    assert det_env["DET_MASTER"].startswith("https://")
    det = det_runner(det_env)
    rows = [line.split("|") for line in det("experiment", "list").splitlines() if "|" in line]
    assert any(row[0].strip() == str(experiment_id) and "e2e" in row[2] for row in rows), rows

    # Plain HTTP to the HTTPS port fails the TLS handshake and is closed unanswered; HTTPS without
    # the CA does not verify.
    host, port = record.master_http_url.removeprefix("https://").rstrip("/").split(":")
    plain = http.client.HTTPConnection(host, int(port), timeout=10)
    plain.request("GET", "/info")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        plain.getresponse()
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(f"{record.master_http_url}info", timeout=10)
    assert requests.get(f"{record.master_http_url}info", verify=ca_file, timeout=10).ok
