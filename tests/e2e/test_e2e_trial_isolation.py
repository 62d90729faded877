"""Trial code cannot reach the control plane (issue 15, "what must be true" 2): on a local cluster
run as root, a trial (tests/e2e/fixtures/isolation_probe) tries to read the cluster record and its
token, the master's SQLite file and the state directory, its parents' environments, to find the
token anywhere in /proc, and to register an agent with whatever token it found; each attempt is
refused, and no agent joins. The token is in no process's command line, nor in what the task was
given (its environment, its folder, /run/determined)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.api.v1 import agent_pb2
from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.record import load_record
from cairn.localcluster.task_isolation import TASK_USER, shared_dir
from tests.e2e.helpers import config, create, logs, state, trials
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
PROBE_DIR = Path(__file__).parent / "fixtures" / "isolation_probe"
SYSTEM_PYTHON = Path("/usr/bin/python3")
ATTEMPTS = {
    "read the cluster record",
    "list the state dir",
    "read the master's database",
    "write the master's database",
    "find the agents' launch files",
    "read an agent's credential",
    "find the cluster token",
    "register an agent without a token",
    "read a parent's environment",
    "see the host's /tmp",
}

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not SYSTEM_PYTHON.exists(),
    reason="trial isolation needs root, setpriv and a system Python the task user can run",
)


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A folder every user may pass through (pytest's tmp_path is inside root's owner-only one),
    so that only the cluster's own permissions stand between the trial and its state; not under
    /tmp, which the trial has a private one of."""
    folder = Path(tempfile.mkdtemp(prefix="cairn-isolation-", dir="/var/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def isolated_cluster(reachable_dir: Path) -> Iterator[TestCluster]:
    # The trials' interpreter must be one the task user can run: the system's, in a virtualenv.
    task_env = reachable_dir / "task-env"
    subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(task_env)], check=True)
    state_dir = reachable_dir / "cluster"
    with running_cluster(state_dir, None, agents=1, slots=1, task_env=task_env) as cluster:
        yield cluster
    shutil.rmtree(shared_dir(state_dir), ignore_errors=True)


def probe_config(cluster: TestCluster, tmp_marker: Path) -> str:
    paths = ClusterPaths(cluster.state_dir)
    site_packages = next((REPO / ".venv" / "lib").glob("python3*/site-packages"))
    variables = {
        "PROBE_STATE_DIR": str(paths.state_dir),
        "PROBE_RECORD": str(paths.record_file),
        "PROBE_DATABASE": str(paths.master_dir / "cairn.db"),
        "PROBE_MASTER": cluster.address,
        "PROBE_TMP_MARKER": str(tmp_marker),
        # grpc and Cairn's stubs, to speak the agents' protocol.
        "PROBE_PYTHONPATH": os.pathsep.join([str(REPO / "clients" / "python"), str(site_packages)]),
    }
    return config(
        name="isolation-probe",
        entrypoint="python3 probe.py",
        environment={"environment_variables": [f"{k}={v}" for k, v in variables.items()]},
    )


def processes_showing(secret: str) -> list[str]:
    """The command lines (readable by every user) that hold `secret`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue  # the process has ended
        if any(secret.encode() in word for word in words):
            found.append(b" ".join(words).decode(errors="replace"))
    return found


def test_trial_code_cannot_reach_the_control_plane(isolated_cluster: TestCluster) -> None:
    cluster = isolated_cluster
    agent_log = cluster.log("agent-1")
    assert "tasks run as an unprivileged user" in agent_log and TASK_USER in agent_log, agent_log
    api = cluster.login()
    # A file of another user in the host's /tmp, world-readable: the trial must not see it.
    tmp_marker = Path(tempfile.mkstemp(prefix="cairn-isolation-marker-", dir="/tmp")[1])
    tmp_marker.chmod(0o644)
    try:
        experiment_id = create(api, probe_config(cluster, tmp_marker), model_dir=PROBE_DIR)
        wait_for(
            lambda: state(api, experiment_id) in ("COMPLETED", "ERROR"),
            timeout=120,
            what=f"experiment {experiment_id} to end",
        )
    finally:
        tmp_marker.unlink()
    trial_id = trials(api, experiment_id)[0].id

    def finished_report() -> list[str] | None:
        found = logs(api, trial_id)
        return found if "PROBE done" in found else None

    lines = wait_for(finished_report, timeout=30, what="the probe's report in the trial's log")
    report = {
        line.removeprefix("PROBE ").split(": ", 1)[0]: line.split(": ", 1)[1]
        for line in lines
        if line.startswith("PROBE ") and ": " in line
    }
    assert set(report) == ATTEMPTS, lines
    got = {attempt: outcome for attempt, outcome in report.items() if not outcome.startswith("refused")}
    assert got == {}, lines
    # The refusals are the kernel's and the master's, not a missing file or a typo in a path.
    assert report["read the cluster record"] == "refused (Permission denied)"
    assert report["read the master's database"] == "refused (Permission denied)"
    assert report["list the state dir"] == "refused (Permission denied)"
    assert report["read an agent's credential"] == "refused (Permission denied)"
    assert report["register an agent without a token"].startswith("refused (UNAUTHENTICATED")

    # None of its parents (the shim, the agent, the cluster's watchdog) lets it read their environment.
    parents = re.fullmatch(r"refused \(0 of (\d+) readable\)", report["read a parent's environment"])
    assert parents is not None and int(parents[1]) >= 2, lines

    record = load_record(ClusterPaths(cluster.state_dir).record_file)
    assert record is not None
    token = record.cluster_token
    assert len(token) >= 32
    given = [line for line in lines if line.startswith("GIVEN ")]
    assert any(line.startswith("GIVEN file /run/determined/info/cluster.json") for line in given), lines
    assert not [line for line in given if token in line]
    credential_file = ClusterPaths(cluster.state_dir).agent_work_dir("agent-1") / "agent-credential.json"
    credential = json.loads(credential_file.read_text())["credential"]
    assert not [line for line in given if credential in line]
    assert processes_showing(credential) == []
    assert processes_showing(token) == []
    assert [a.id for a in api.GetAgents(agent_pb2.GetAgentsRequest()).agents] == ["agent-1"]
    database = ClusterPaths(cluster.state_dir).master_dir / "cairn.db"
    for path in (database, database.with_name("cairn.db-wal"), database.with_name("cairn.db-shm")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    with sqlite3.connect(database) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "intruder" not in tables
