"""The master's own config and log, and continuing an experiment, with the stock determined==0.38.1
CLI: `det master config` shows the settings with no secret (the database password is in the URL the
cluster runs with on PostgreSQL), `det master logs` shows the start-up and `-f` follows new records,
and `det experiment continue` trains a completed single-trial experiment on to a longer max_length
while a grid search is refused. Every check reads the end state back."""

from __future__ import annotations

import getpass
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from cairn.api.v1 import experiment_pb2
from tests.e2e.determined_client import DET, det_runner, determined_env
from tests.e2e.helpers import experiment, logs, stored_metrics, trial_state, trials, wait_state
from tests.support.cluster import TestCluster
from tests.support.polling import wait_for

FIXTURES = Path(__file__).parent / "fixtures"
DET_TRIAL_DIR = FIXTURES / "det_trial"
HIDDEN = "********"
# Put into a PostgreSQL URL that has none; the local server's peer (or trust) authentication does
# not ask for it, and a server that checks passwords has its own in its URL already.
PG_PASSWORD = "e2e-Secret-pw"

# The master's config as it shows its database, and a trial continued from its stored state.
pytestmark = pytest.mark.on_each_database


@pytest.fixture
def db_url(db_url: str | None) -> str | None:
    """The backend's URL, with a password on PostgreSQL."""
    if db_url is None:
        return None
    url = make_url(db_url)
    if url.password:
        return db_url
    with_password = url.set(username=url.username or getpass.getuser(), password=PG_PASSWORD)
    return with_password.render_as_string(hide_password=False)


def cairn_runner(
    cluster: TestCluster, home: Path, user: str
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Cairn's own CLI (`cairn ARGS...`) logged in as `user`."""
    assert cluster.record is not None
    env = {**os.environ, "CAIRN_MASTER": cluster.record.master_grpc_address, "CAIRN_CONFIG_DIR": str(home)}

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cairn.cli.main", *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    assert run("user", "login", user, "--password-stdin", stdin="\n").returncode == 0
    return run


def core_config(tmp_path: Path, name: str, length: int, grid: bool = False) -> Path:
    """det_core_trial.py training to the searcher's max_length (no `steps` hyperparameter)."""
    hparams = "increment_by: {type: categorical, vals: [1, 2]}" if grid else "increment_by: 2"
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"""
name: {name}
entrypoint: python3 det_core_trial.py
hyperparameters:
  step_s: 0.05
  {hparams}
searcher:
  name: {"grid" if grid else "single"}
  metric: x
  smaller_is_better: false
  max_length: {{batches: {length}}}
max_restarts: 0
"""
    )
    return path


@pytest.fixture
def followed_master_logs(cluster: TestCluster, tmp_path: Path) -> Iterator[queue.Queue[str]]:
    """`det master logs -f` running in the background: its lines arrive on the queue."""
    env = determined_env(cluster, tmp_path / "follow-home")
    det_runner(env)  # logs in
    process = subprocess.Popen(
        [str(DET), "-u", "determined", "master", "logs", "-f"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    try:
        yield lines
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_line(lines: queue.Queue[str], needle: str, timeout: float = 60) -> list[str]:
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"`det master logs -f` never showed {needle!r}; it showed {seen[-20:]}"
            ) from None
        seen.append(line)
        if needle in line:
            return seen


def test_master_config_hides_secrets_and_master_logs_follow(
    cluster: TestCluster, db_url: str | None, followed_master_logs: queue.Queue[str], tmp_path: Path
) -> None:
    env = determined_env(cluster, tmp_path / "home")
    admin = det_runner(env, "admin")
    user = det_runner(env, "determined")
    assert cluster.record is not None
    secrets = [cluster.record.cluster_token]
    if db_url is not None:
        password = make_url(db_url).password
        assert password
        secrets.append(str(password))

    shown_yaml = admin("master", "config")
    shown = json.loads(admin("master", "config", "--json"))
    for text in (shown_yaml, json.dumps(shown)):
        for secret in secrets:
            assert secret not in text
    assert shown["port"] == int(cluster.record.master_http_url.rstrip("/").rsplit(":", 1)[1])
    assert shown["cluster_token"] == HIDDEN
    assert shown["resource_pools"][0]["pool_name"] == "default"
    if db_url is None:
        assert shown["db"]["type"] == "sqlite"
    else:
        assert shown["db"]["type"] == "postgresql" and shown["db"]["password"] == HIDDEN
        assert f":{HIDDEN}@" in shown["db"]["url"]
    # Only admins, as in Determined.
    refused = user("master", "config", check=False)
    assert "pool_name" not in refused and "forbidden" in refused.lower()

    # The master's start-up is in its log; --tail gives the newest records only.
    everything = user("master", "logs").splitlines()
    assert any("[INFO]: migrating database" in line for line in everything)
    assert any("master ready" in line and "grpc_port=" in line for line in everything)
    assert len(user("master", "logs", "--tail", "2").splitlines()) == 2

    # The same through Cairn's own CLI.
    cairn = cairn_runner(cluster, tmp_path / "cairn-home", "admin")
    config = cairn("master", "config", "--json")
    assert config.returncode == 0 and json.loads(config.stdout)["cluster_token"] == HIDDEN
    assert not any(secret in config.stdout for secret in secrets)
    tail = cairn("master", "logs", "--tail", "3")
    assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 3

    # -f shows what was there, then follows a record logged afterwards.
    _wait_line(followed_master_logs, "master ready")
    user("experiment", "create", str(core_config(tmp_path, "followed", 2)), str(DET_TRIAL_DIR))
    _wait_line(followed_master_logs, "experiment created experiment_id=1")


def test_continue_trains_a_completed_single_trial_on_and_refuses_a_grid(
    cluster: TestCluster, det, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    api = cluster.login()
    assert "Created experiment 1" in det(
        "experiment", "create", str(core_config(tmp_path, "single", 6)), str(DET_TRIAL_DIR)
    )
    assert "Created experiment 2" in det(
        "experiment", "create", str(core_config(tmp_path, "grid", 2, grid=True)), str(DET_TRIAL_DIR)
    )
    wait_state(api, 1, "COMPLETED")
    wait_state(api, 2, "COMPLETED")
    (trial,) = trials(api, 1)
    assert [m.total_batches for m in stored_metrics(api, trial.id, "training")] == [1, 2, 3, 4, 5, 6]

    assert "Continued experiment 1" in det(
        "experiment", "continue", "1", "--config", "searcher.max_length.batches=12"
    )
    wait_for(lambda: experiment(api, 1).state != experiment_pb2.Experiment.STATE_COMPLETED, timeout=30,
             what="experiment 1 to leave COMPLETED")  # fmt: skip
    wait_state(api, 1, "COMPLETED")

    # The same trial, resumed from its checkpoint at step 6, trained on to 12 and completed again.
    (resumed,) = trials(api, 1)
    assert resumed.id == trial.id and trial_state(resumed) == "COMPLETED"
    lines = logs(api, trial.id)
    assert any("DET-RESUMED 6" in line for line in lines)
    assert sum("DET-DONE" in line for line in lines) == 2
    steps = [m.total_batches for m in stored_metrics(api, trial.id, "training")]
    assert steps == list(range(1, 13))
    assert "max_length:\n    batches: 12" in det("experiment", "config", "1")
    assert "COMPLETED" in det("experiment", "describe", "1")

    # Cairn's own CLI continues it once more, from the checkpoint at 12 to 15.
    cairn = cairn_runner(cluster, tmp_path / "cairn-home", "determined")
    continued = cairn("experiment", "continue", "1", "--config", "searcher.max_length.batches=15")
    assert continued.returncode == 0, continued.stderr
    wait_for(lambda: experiment(api, 1).state != experiment_pb2.Experiment.STATE_COMPLETED, timeout=30,
             what="experiment 1 to leave COMPLETED again")  # fmt: skip
    wait_state(api, 1, "COMPLETED")
    assert [m.total_batches for m in stored_metrics(api, trial.id, "training")] == list(range(1, 16))
    assert any("DET-RESUMED 12" in line for line in logs(api, trial.id))

    # A grid search is refused and left as it was.
    grid_before = (experiment(api, 2), [(t.id, t.state, t.end_time) for t in trials(api, 2)])
    refused = det("experiment", "continue", "2", "--config", "searcher.max_length.batches=12", check=False)
    assert "only a single-searcher experiment takes an override config" in refused
    assert "Continued experiment" not in refused
    grid_after = (experiment(api, 2), [(t.id, t.state, t.end_time) for t in trials(api, 2)])
    assert grid_after == grid_before
    assert "max_length:\n    batches: 2" in det("experiment", "config", "2")
    refused_by_cairn = cairn("experiment", "continue", "2")
    assert refused_by_cairn.returncode == 1 and "has been completed" in refused_by_cairn.stderr
