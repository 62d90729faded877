"""The Docker runtime end to end: real local clusters whose agent runs `--runtime docker`, trials in
containers of the task image (tests/support/docker_env.py: skipped, saying why, where dockerd
cannot be reached). One database backend is enough: nothing here depends on it."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import yaml

from cairn.agent_files import DOCKER_LABEL_CONTAINER_ID, DOCKER_LABEL_WORK_DIR
from cairn.api.v1 import experiment_pb2
from tests.e2e.determined_client import det_runner, determined_env
from tests.e2e.helpers import config, create, ledger, logs, stored_metrics, trials, wait_state
from tests.e2e.test_e2e_commands import RUNNING, TERMINATED, task_lines, wait_command
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

FIXTURES = Path(__file__).parent / "fixtures"
PROBE_DIR = FIXTURES / "docker_probe"
DET_TRIAL_DIR = FIXTURES / "det_trial"

pytestmark = pytest.mark.timeout(600)


def cairn_containers(state_dir: Path) -> list[dict[str, object]]:
    """Every Docker container (running or not) an agent of this cluster made."""
    client = docker.from_env(timeout=30)
    try:
        found = client.api.containers(all=True, filters={"label": DOCKER_LABEL_WORK_DIR})
    finally:
        client.close()
    root = str(state_dir.resolve())
    return [c for c in found if str(c["Labels"][DOCKER_LABEL_WORK_DIR]).startswith(root)]


@pytest.fixture
def docker_cluster(task_image: str, tmp_path: Path) -> Iterator[TestCluster]:
    state_dir = tmp_path / "cluster"
    # Host paths users may bind-mount (the master refuses others to non-admins).
    allow = {"CAIRN_BIND_MOUNT_ALLOW": str(tmp_path / "mounts")}
    with running_cluster(
        state_dir, None, runtime="docker", default_image=task_image, extra_env=allow
    ) as cluster:
        yield cluster
    assert cairn_containers(state_dir) == [], "Docker containers left behind by cluster down"


def probe_config(**hparams: object) -> str:
    return config(
        entrypoint="python3 probe.py",
        hyperparameters=hparams,
        searcher={"name": "single", "metric": "x", "max_length": {"batches": 1}},
    )


def test_a_trial_runs_in_a_container_with_the_task_environment_and_its_files_copied_in(
    docker_cluster: TestCluster,
) -> None:
    api = docker_cluster.login()
    experiment_id = create(api, probe_config(exit_code=0), model_dir=PROBE_DIR)
    wait_state(api, experiment_id, "COMPLETED", timeout=180)
    trial = trials(api, experiment_id)[0]
    lines = logs(api, trial.id)
    text = "\n".join(lines)
    assert "PROBE in-docker=True" in text
    assert "PROBE cwd=/run/determined/workdir" in text
    assert "PROBE files=['probe.py']" in text  # the model definition, copied; no agent bookkeeping
    env_line = next(line for line in lines if "PROBE env=" in line)
    for name in (
        "CAIRN_ALLOCATION_TOKEN",
        "CAIRN_TRIAL_ID",
        "DET_MASTER",
        "DET_TRIAL_ID",
        "DET_SESSION_TOKEN",
    ):
        assert name in env_line
    assert "cluster.json" in text and "trial.json" in text  # /run/determined/info
    assert sum("PROBE to stderr" in line for line in lines) == 1


def test_a_failing_trial_reports_its_exit_code(docker_cluster: TestCluster) -> None:
    api = docker_cluster.login()
    experiment_id = create(api, probe_config(exit_code=3), model_dir=PROBE_DIR)
    wait_state(api, experiment_id, "ERROR", timeout=180)
    text = "\n".join(logs(api, trials(api, experiment_id)[0].id))
    assert "PROBE to stderr" in text


def test_a_read_only_bind_mount_cannot_be_written(docker_cluster: TestCluster, tmp_path: Path) -> None:
    shared = tmp_path / "mounts" / "data"
    shared.mkdir(parents=True)
    os.chmod(shared, 0o777)
    api = docker_cluster.login()
    text = config(
        entrypoint="python3 probe.py",
        hyperparameters={"write_to": "/mnt/ro"},
        searcher={"name": "single", "metric": "x", "max_length": {"batches": 1}},
        bind_mounts=[{"host_path": str(shared), "container_path": "/mnt/ro", "read_only": True}],
    )
    experiment_id = create(api, text, model_dir=PROBE_DIR)
    wait_state(api, experiment_id, "COMPLETED", timeout=180)
    said = "\n".join(logs(api, trials(api, experiment_id)[0].id))
    assert "PROBE write /mnt/ro: refused: Read-only file system" in said
    assert not (shared / "written-by-probe").exists()


def test_a_missing_image_ends_in_error_with_its_name_and_no_restart_loop(docker_cluster: TestCluster) -> None:
    api = docker_cluster.login()
    text = config(environment={"image": "cairn-no-such-image:never"}, max_restarts=1)
    experiment_id = create(api, text)
    wait_state(api, experiment_id, "ERROR", timeout=180)
    trial = trials(api, experiment_id)[0]
    # max_restarts bounds it: the first run and one restart, then the trial is over.
    assert trial.restarts == 1
    said = "\n".join(logs(api, trial.id))
    assert "image cairn-no-such-image:never not found locally and could not be pulled" in said
    assert "pulling image cairn-no-such-image:never" in said


def test_agent_kill_9_and_a_lost_supervisor_reattach_the_container_by_its_labels(
    docker_cluster: TestCluster,
) -> None:
    api = docker_cluster.login()
    experiment_id = create(api, config(hyperparameters={"steps": 30, "step_s": 0.15, "ckpt_every": 5}))
    trial_id = wait_for(lambda: trials(api, experiment_id), timeout=60, what="trial")[0].id
    wait_for(lambda: len(stored_metrics(api, trial_id, "training")) >= 5, timeout=120, what="first reports")
    allocation_before = trials(api, experiment_id)[0].allocation_id
    (running,) = cairn_containers(docker_cluster.state_dir)

    docker_cluster.kill("agent-1", signal.SIGKILL)
    # Its supervisor too: the restarted agent must find the container by its labels alone.
    (shim_file,) = docker_cluster.state_dir.glob("**/containers/*/.cairn-agent/shim.json")
    os.kill(int(json.loads(shim_file.read_text())["pid"]), signal.SIGKILL)
    docker_cluster.restart("agent-1")

    wait_state(api, experiment_id, "COMPLETED", timeout=180)
    trial = trials(api, experiment_id)[0]
    assert trial.allocation_id == allocation_before and trial.restarts == 0
    said = ledger(logs(api, trial_id))
    stored = [(m.total_batches, m.trial_run_id) for m in stored_metrics(api, trial_id, "training")]
    assert Counter(stored) == Counter(said["training"])
    assert [s for s, _ in said["training"]] == list(range(1, 31))
    # Every line the trial wrote was shipped once, across the agent's and the supervisor's deaths.
    ledger_lines = [line for line in logs(api, trial_id) if line.startswith("LEDGER")]
    assert len(ledger_lines) == len(set(ledger_lines)) == 30 + 30
    assert "reattached to the running container" in "\n".join(logs(api, trial_id))
    assert running["Labels"][DOCKER_LABEL_CONTAINER_ID]  # type: ignore[index]


def test_a_determined_core_api_script_runs_unchanged_in_the_task_image(docker_cluster: TestCluster) -> None:
    api = docker_cluster.login()
    text = config(
        name="determined-core-api",
        entrypoint="python3 det_core_trial.py",
        hyperparameters={"steps": 6, "step_s": 0.05, "increment_by": 2},
        searcher={"name": "single", "metric": "x", "smaller_is_better": False, "max_length": {"batches": 6}},
    )
    experiment_id = create(api, text, model_dir=DET_TRIAL_DIR)
    wait_state(api, experiment_id, "COMPLETED", timeout=240)
    trial = trials(api, experiment_id)[0]
    training = [
        (m.total_batches, m.metrics["avg_metrics"]["x"]) for m in stored_metrics(api, trial.id, "training")
    ]
    assert training == [(step, 2.0 * step) for step in range(1, 7)]
    said = "\n".join(logs(api, trial.id))
    assert f"DET-INFO trial={trial.id}" in said and "DET-DONE" in said


def test_cluster_down_leaves_no_container_of_a_running_trial(task_image: str, tmp_path: Path) -> None:
    state_dir = tmp_path / "cluster"
    with running_cluster(state_dir, None, runtime="docker", default_image=task_image) as cluster:
        api = cluster.login()
        experiment_id = create(api, config(hyperparameters={"steps": 600, "step_s": 0.2}))
        wait_for(
            lambda: [t for t in trials(api, experiment_id) if t.runner_state == "RUNNING"] or None,
            timeout=120,
            what="a running trial",
        )
        assert len(cairn_containers(state_dir)) == 1
    assert cairn_containers(state_dir) == []


def test_the_digits_example_completes_in_containers(docker_cluster: TestCluster) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "digits"
    text = yaml.safe_load((example / "random.yaml").read_text())
    text["searcher"].update(max_trials=2, max_length={"epochs": 1})
    text["max_restarts"] = 0
    api = docker_cluster.login()
    experiment_id = create(api, yaml.safe_dump(text), model_dir=example)
    wait_state(api, experiment_id, "COMPLETED", timeout=400)
    done = trials(api, experiment_id)
    assert len(done) == 2
    for trial in done:
        assert stored_metrics(api, trial.id, "validation"), f"trial {trial.id} validated nothing"


def test_killing_an_experiment_stops_its_container(docker_cluster: TestCluster) -> None:
    api = docker_cluster.login()
    experiment_id = create(api, config(hyperparameters={"steps": 600, "step_s": 0.2}))
    trial_id = wait_for(lambda: trials(api, experiment_id), timeout=60, what="trial")[0].id
    wait_for(lambda: len(stored_metrics(api, trial_id, "training")) >= 2, timeout=120, what="first reports")
    assert len(cairn_containers(docker_cluster.state_dir)) == 1
    api.KillExperiment(experiment_pb2.KillExperimentRequest(id=experiment_id))
    wait_state(api, experiment_id, "CANCELED", timeout=120)
    # Its supervisor removes the container once it has ended.
    wait_for(
        lambda: not cairn_containers(docker_cluster.state_dir), timeout=30, what="the container's removal"
    )


def test_cluster_down_removes_the_container_of_a_dead_agent(task_image: str, tmp_path: Path) -> None:
    state_dir = tmp_path / "cluster"
    with running_cluster(state_dir, None, runtime="docker", default_image=task_image) as cluster:
        api = cluster.login()
        experiment_id = create(api, config(hyperparameters={"steps": 600, "step_s": 0.2}))
        trial_id = wait_for(lambda: trials(api, experiment_id), timeout=60, what="trial")[0].id
        wait_for(lambda: stored_metrics(api, trial_id, "training"), timeout=120, what="first reports")
        # Nobody is left to stop the container but the sweep, which finds it by its label.
        cluster.kill("agent-1", signal.SIGKILL)
        (shim_file,) = state_dir.glob("**/containers/*/.cairn-agent/shim.json")
        os.kill(int(json.loads(shim_file.read_text())["pid"]), signal.SIGKILL)
        assert len(cairn_containers(state_dir)) == 1
    assert cairn_containers(state_dir) == []


def test_commands_run_in_containers_of_the_task_image(docker_cluster: TestCluster, tmp_path: Path) -> None:
    """`det cmd run` on the Docker runtime: its context copied in, its output followed, its exit
    code recorded; a killed long command leaves no container behind."""
    api = docker_cluster.login()
    det = det_runner(determined_env(docker_cluster, tmp_path / "home"))
    context = tmp_path / "context"
    context.mkdir()
    (context / "data.txt").write_text("from the context\n")
    out = det("cmd", "run", "--context", str(context), "cat data.txt; cat /etc/debian_version; exit 3")
    assert "from the context" in out
    (listed,) = json.loads(det("cmd", "list", "--json"))
    ended = wait_command(api, listed["id"], TERMINATED)
    assert (ended.exit_code, ended.exit_status) == (3, "exited with code 3")
    assert "from the context" in task_lines(api, ended.id)
    long_running = det("cmd", "run", "-d", "sleep 600").strip()
    wait_command(api, long_running, RUNNING)
    det("cmd", "kill", long_running)
    assert wait_command(api, long_running, TERMINATED).exit_status == "killed"
    wait_for(lambda: cairn_containers(docker_cluster.state_dir) == [], timeout=60, what="no containers")
