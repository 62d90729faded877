"""TensorBoard with the stock determined==0.38.1 client: two experiments whose trials report
metrics, one through Cairn's Core API and one through Determined's own (its TensorBoard files land
at the same place in checkpoint storage), complete; `det tensorboard start` waits until
TensorBoard answers, which it does only through the master's proxy and only with a session, and
`det task list` shows its port; the scalars each trial reported are served by TensorBoard's data
API, one run per trial; `det tensorboard kill` ends it; deleting an experiment deletes its
TensorBoard files. On the process and the Docker runtime."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from cairn.api.v1 import auth_pb2, experiment_pb2, master_pb2
from cairn.client.password import salt_and_hash
from tests.e2e.helpers import cairn_cli, config, create, experiment, trials, wait_state
from tests.support.cluster import TestCluster, running_cluster
from tests.support.docker_env import require_task_image
from tests.support.polling import wait_for

DET_TRIAL_DIR = Path(__file__).parent / "fixtures" / "det_trial"
STEPS = 4


@pytest.fixture(params=["process", "docker"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with two slots, on each runtime (the Docker one where dockerd runs); SQLite only,
    nothing here depends on the database backend."""
    image = require_task_image() if request.param == "docker" else None
    with running_cluster(
        tmp_path / "cluster", None, agents=1, slots=2, runtime=request.param, default_image=image
    ) as c:
        yield c


def _determined_core_api_experiment(det: Callable[..., str], tmp_path: Path) -> int:
    path = tmp_path / "det.yaml"
    path.write_text(
        "name: determined-core-api\n"
        "entrypoint: python3 det_core_trial.py\n"
        f"hyperparameters: {{steps: {STEPS}, step_s: 0.01, increment_by: 2}}\n"
        f"searcher: {{name: single, metric: x, smaller_is_better: false, max_length: {{batches: {STEPS}}}}}\n"
        "max_restarts: 0\n"
    )
    created = det("experiment", "create", str(path), str(DET_TRIAL_DIR), "--paused")
    return int(created.split("Created experiment ")[1].split()[0])


def test_tensorboard_serves_the_reported_scalars_through_the_proxy_and_goes_with_the_experiment(
    cluster: TestCluster, det: Callable[..., str], tmp_path: Path
) -> None:
    api = cluster.login()
    assert cluster.record is not None and cluster.record.master_http_url
    master = cluster.record.master_http_url.rstrip("/")
    cluster_id = cluster.raw_stub().GetMaster(master_pb2.GetMasterRequest(), timeout=10).cluster_id

    cairn_exp = create(api, config(hyperparameters={"steps": STEPS, "step_s": 0.01}))
    det_exp = _determined_core_api_experiment(det, tmp_path)
    det("experiment", "activate", str(det_exp))
    for experiment_id in (cairn_exp, det_exp):
        wait_state(api, experiment_id, "COMPLETED", timeout=180)
    (cairn_trial,) = trials(api, cairn_exp)
    (det_trial,) = trials(api, det_exp)

    # Both clients' files are at Determined's path in the experiment's checkpoint storage.
    host_path = Path(experiment(api, cairn_exp).config["checkpoint_storage"]["host_path"])
    files_of = {
        exp: host_path / cluster_id / "tensorboard" / "experiment" / str(exp) for exp in (cairn_exp, det_exp)
    }
    for exp, trial in ((cairn_exp, cairn_trial.id), (det_exp, det_trial.id)):
        assert list((files_of[exp] / "trial" / str(trial)).rglob("*tfevents*")), f"no event files of {exp}"

    out = det("tensorboard", "start", str(cairn_exp), str(det_exp), "--no-browser")
    assert "Tensorboard is running at" in out  # `det` waited until it answered
    (listed,) = json.loads(det("tensorboard", "list", "--json"))
    task_id = listed["id"]
    assert listed["state"] == "RUNNING" and listed["serviceAddress"] == f"/proxy/{task_id}/"
    assert sorted(listed["experimentIds"]) == sorted([cairn_exp, det_exp])
    assert quote(f"/proxy/{task_id}/", safe="") in out  # the URL `det` prints opens the master's proxy
    # `det task list` shows its port as Determined's ProxyPortConfig: its default service, named by
    # the task's id, HTTP behind a session.
    (summary,) = [t for t in json.loads(det("task", "list", "--json")).values() if t["taskId"] == task_id]
    ((service, port, tcp, unauthenticated),) = [
        (p["serviceId"], p["port"], p["proxyTcp"], p["unauthenticated"]) for p in summary["proxyPorts"]
    ]
    assert (service, bool(tcp), bool(unauthenticated)) == (task_id, False, False) and port > 0

    base = f"{master}/proxy/{task_id}/"
    anonymous = requests.get(f"{base}data/runs", timeout=30)
    assert anonymous.status_code == 401
    http = requests.Session()
    login = auth_pb2.LoginRequest(username="determined", password=salt_and_hash(""), is_hashed=True)
    http.headers["Authorization"] = f"Bearer {cluster.raw_stub().Login(login, timeout=30).token}"
    cairn_run = f"experiment_{cairn_exp}/trial_{cairn_trial.id}"
    det_run = f"experiment_{det_exp}/trial_{det_trial.id}"
    assert {cairn_run, det_run} <= set(http.get(f"{base}data/runs", timeout=30).json())

    def scalars(run: str, tag: str) -> list[tuple[int, float]]:
        response = http.get(
            f"{base}data/plugin/scalars/scalars?tag={quote(tag, safe='')}&run={quote(run, safe='')}",
            timeout=30,
        )
        assert response.status_code == 200, response.text
        return [(int(step), round(float(value), 4)) for _wall, step, value in response.json()]

    # What each trial reported: Cairn's trial loss = 1/step, validation_loss = 1/step; Determined's x.
    assert scalars(cairn_run, "Determined/loss") == [(s, round(1 / s, 4)) for s in range(1, STEPS + 1)]
    assert scalars(cairn_run, "Determined/validation_loss") == [
        (s, round(1 / s, 4)) for s in range(1, STEPS + 1)
    ]
    assert scalars(det_run, "Determined/x") == [(s, 2.0 * s) for s in range(1, STEPS + 1)]

    det("tensorboard", "kill", task_id)
    wait_for(
        lambda: http.get(f"{master}/api/v1/tasks/{task_id}", timeout=30).json()["task"].get("endTime"),
        timeout=60,
        what=f"TensorBoard {task_id} to end",
    )
    assert http.get(f"{base}data/runs", timeout=30).status_code == 404  # the proxy refuses an ended task
    assert json.loads(det("tensorboard", "list", "--json"))[0]["state"] == "TERMINATED"

    # Cairn's own CLI, for one named trial: it waits until TensorBoard answers, lists it, kills it.
    cairn = cairn_cli(cluster, tmp_path / "cairn-home")
    started = cairn("tensorboard", "start", "--trial-ids", str(cairn_trial.id))
    assert "TensorBoard is running at /proxy/" in started
    (mine,) = [
        b for b in json.loads(cairn("tensorboard", "list", "--json"))["tensorboards"] if b["id"] != task_id
    ]
    assert mine["trialIds"] == [cairn_trial.id] and mine["state"] == "STATE_RUNNING"
    runs = http.get(f"{master}/proxy/{mine['id']}/data/runs", timeout=30).json()
    assert runs == [cairn_run]  # only the trial it was asked for
    cairn("tensorboard", "kill", mine["id"])

    api.DeleteExperiment(experiment_pb2.DeleteExperimentRequest(experiment_id=cairn_exp))
    wait_for(lambda: not files_of[cairn_exp].exists(), timeout=60, what="the TensorBoard files to be deleted")
    assert files_of[det_exp].exists()  # another experiment's files stay
