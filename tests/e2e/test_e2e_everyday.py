"""What a Determined user does every day, with the stock determined==0.38.1 client (CLI and SDK):
ids that are never reused, forks, task logs, the job queue, and experiment edits that the scheduler
acts on. Every check reads the end state back (Cairn's API, a second command); `det` exits 0 after
many failures, so its exit code alone proves nothing."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import grpc

import cairn
from cairn.api.v1 import experiment_pb2, job_pb2
from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.e2e.helpers import experiment, logs, trial_state, trials, wait_state
from tests.support.cluster import TestCluster
from tests.support.polling import wait_for

FIXTURES = Path(__file__).parent / "fixtures"
DET_TRIAL_DIR = FIXTURES / "det_trial"


def core_config(tmp_path: Path, name: str, steps: int, step_s: float = 0.05, grid: bool = False) -> Path:
    hparams = "increment_by: {type: categorical, vals: [1, 2]}" if grid else "increment_by: 2"
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"""
name: {name}
entrypoint: python3 det_core_trial.py
hyperparameters:
  steps: {steps}
  step_s: {step_s}
  {hparams}
searcher:
  name: {"grid" if grid else "single"}
  metric: x
  smaller_is_better: false
  max_length: {{batches: {steps}}}
max_restarts: 0
"""
    )
    return path


def config_of(api, experiment_id: int):  # type: ignore[no-untyped-def]
    return api.GetExperiment(experiment_pb2.GetExperimentRequest(experiment_id=experiment_id)).config


def test_ids_forks_metrics_task_logs_and_versions(cluster: TestCluster, det, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    api = cluster.login()
    sdk = sdk_runner(determined_env(cluster, tmp_path / "home"))
    for number in (1, 2):
        created = det("experiment", "create", str(core_config(tmp_path, f"e{number}", 6)), str(DET_TRIAL_DIR))
        assert f"Created experiment {number}" in created
    wait_state(api, 1, "COMPLETED")
    wait_state(api, 2, "COMPLETED")

    # Deleting the newest experiment does not free its ids: the next experiment, trial and
    # allocation get new ones, so the agent starts its container (before, it refused a container
    # id it had already run and the experiment stayed ACTIVE with nothing running).
    det("experiment", "delete", "2", "--yes")

    def deleted() -> bool:
        try:
            experiment(api, 2)
        except grpc.RpcError as exc:
            return exc.code() == grpc.StatusCode.NOT_FOUND
        return False

    wait_for(deleted, timeout=60, what="experiment 2 deleted")
    assert "Created experiment 3" in det(
        "experiment", "create", str(core_config(tmp_path, "e3", 6)), str(DET_TRIAL_DIR)
    )
    wait_state(api, 3, "COMPLETED")
    assert [t.id for t in trials(api, 3)] == [3]

    # A fork sends a parent id and a config, no model definition: it runs the parent's code.
    parent_config = str(core_config(tmp_path, "e1", 4))
    forked = sdk(
        f"""
config = open({parent_config!r}).read().replace("name: e1", "name: forked")
r = bindings.post_CreateExperiment(
    client._determined._session,
    body=bindings.v1CreateExperimentRequest(config=config, parentId=1, activate=True),
)
result = [r.experiment.id, r.experiment.forkedFrom]
"""
    )
    assert forked == [4, 1]
    wait_state(api, 4, "COMPLETED")
    assert any("DET-DONE" in line for line in logs(api, trials(api, 4)[0].id))

    # The SDK's validation metrics, resource pools (with their scheduler details) and the job queue.
    validation = sdk(
        """
trial = client.get_trial(1)
result = [[m.steps_completed, m.metrics["x"]] for m in trial.iter_metrics("validation")]
"""
    )
    assert validation == [[2, 4.0], [4, 8.0], [6, 12.0]]
    pools = sdk(
        """
pools = bindings.get_GetResourcePools(client._determined._session).resourcePools
result = [[p.name, p.schedulerType.value, p.details.priorityScheduler is not None] for p in pools]
"""
    )
    assert pools == [["default", "SCHEDULER_TYPE_PRIORITY", True]]
    assert "Slots (acquired/needed)" in det("job", "list")

    # Task ids as Determined's client takes them, and the task's logs.
    task_id = sdk("result = bindings.get_GetTrial(client._determined._session, trialId=1).trial.taskId")
    assert task_id.startswith("1.") and len(task_id) == 2 + 36
    task_logs = det("task", "logs", task_id)
    assert "DET-DONE" in task_logs and "DET-INFO trial=1" in task_logs

    # No "master version is less than CLI version" warning; Cairn's own version beside the API level.
    info = det("master", "info", check=False)
    assert "less than CLI version" not in info
    assert json.loads(det("master", "info", "--json"))["version"] == "0.38.1"
    assert cluster.record is not None
    with urllib.request.urlopen(cluster.record.master_http_url.rstrip("/") + "/info", timeout=10) as reply:
        info_json = json.loads(reply.read())
    assert info_json["version"] == "0.38.1" and info_json["cairn_version"] == cairn.__version__


def test_experiment_edits_reach_the_record_and_the_scheduler(cluster: TestCluster, tmp_path: Path) -> None:
    api = cluster.login("admin")
    env = determined_env(cluster, tmp_path / "home")
    admin = det_runner(env, "admin")
    other = det_runner(env, "determined")
    sdk = sdk_runner(env, "admin")

    # A: two one-slot trials filling both slots; B and C wait behind it.
    admin("experiment", "create", str(core_config(tmp_path, "a", 3000, 0.05, grid=True)), str(DET_TRIAL_DIR))
    wait_for(
        lambda: [t.runner_state for t in trials(api, 1)].count("RUNNING") == 2,
        timeout=120,
        what="both of A's trials running",
    )
    admin("experiment", "create", str(core_config(tmp_path, "b", 3000)), str(DET_TRIAL_DIR))
    admin("experiment", "create", str(core_config(tmp_path, "c", 3000)), str(DET_TRIAL_DIR))
    wait_for(lambda: trials(api, 3), timeout=30, what="C's trial")

    # What Determined's views of a running cluster show.
    slots = admin("slot", "list")
    assert slots.count("(Experiment 1)") == 2 and "Non-Determined" not in slots
    tasks = admin("task", "list")
    assert f"1.{trials(api, 1)[0].request_id}" in tasks or f"1.{trials(api, 1)[1].request_id}" in tasks

    def queue() -> list[dict]:  # type: ignore[type-arg]
        return list(json.loads(admin("job", "list", "--json"))["jobs"])

    jobs = {j["jobId"]: j for j in queue()}
    assert jobs["exp-1"]["allocatedSlots"] == 2 and jobs["exp-1"]["summary"]["state"] == "STATE_SCHEDULED"
    assert jobs["exp-2"]["summary"]["state"] == "STATE_QUEUED"
    assert jobs["exp-2"]["summary"]["jobsAhead"] < jobs["exp-3"]["summary"]["jobsAhead"]

    # Every kind of job is in the queue: a command waits for a slot behind the experiments, and
    # Cairn's reply says why each waiting job waits (Determined's client shows what it knows).
    command_id = admin("cmd", "run", "-d", "sleep 600").strip()
    wait_for(lambda: command_id in {j["entityId"] for j in queue()}, timeout=30, what="the command's job")
    command_job = {j["entityId"]: j for j in queue()}[command_id]
    assert (command_job["type"], command_job["summary"]["state"]) == ("TYPE_COMMAND", "STATE_QUEUED")
    assert "Command" in admin("job", "list")
    waiting = {
        job.full.entity_id: job.full.waiting_reason
        for job in api.GetJobsV2(job_pb2.GetJobsV2Request(limit=-1)).jobs
        if job.full.summary.state == experiment_pb2.JobSummary.STATE_QUEUED
    }
    assert waiting.keys() >= {"2", "3", command_id} and all(waiting.values()), waiting
    admin("cmd", "kill", command_id)

    # Name, description, labels and notes: stored, and shown by a second command.
    admin("experiment", "set", "name", "1", "renamed-a")
    admin("experiment", "set", "description", "1", "two trials")
    admin("experiment", "label", "add", "1", "keep")
    admin("experiment", "label", "add", "1", "drop")
    admin("experiment", "label", "remove", "1", "drop")
    sdk("client.get_experiment(1).set_notes('# notes\\nin markdown')")
    stored = experiment(api, 1)
    assert (stored.name, stored.description, list(stored.labels)) == ("renamed-a", "two trials", ["keep"])
    assert stored.notes == "# notes\nin markdown"
    assert "renamed-a" in admin("experiment", "list")

    # Refused edits change nothing: another user's experiment, a priority out of range, no name.
    denied = other("experiment", "set", "description", "1", "not mine", check=False)
    assert "PermissionDenied" in denied or "belongs to another user" in denied
    refused = admin("experiment", "set", "priority", "2", "100", check=False)
    assert "resources.priority" in refused
    admin("experiment", "set", "name", "1", " ", check=False)
    stored = experiment(api, 1)
    assert (stored.name, stored.description) == ("renamed-a", "two trials")
    assert config_of(api, 2)["resources"]["priority"] is None

    # Priority: C moves ahead of B in the queue (smaller is more important).
    admin("experiment", "set", "priority", "3", "1")
    admin("experiment", "set", "weight", "3", "2.5")
    jobs = {j["jobId"]: j for j in queue()}
    assert jobs["exp-3"]["priority"] == 1 and jobs["exp-3"]["weight"] == 2.5
    assert jobs["exp-3"]["summary"]["jobsAhead"] < jobs["exp-2"]["summary"]["jobsAhead"]

    # max_slots 1: A gives one slot back gracefully (its trial checkpoints and exits on the
    # preemption signal) and the freed slot goes to C, the higher priority, not to B.
    admin("experiment", "set", "max-slots", "1", "1")
    wait_for(
        lambda: any(any("DET-PREEMPTED" in line for line in logs(api, t.id)) for t in trials(api, 1)),
        timeout=90,
        what="one of A's trials preempted",
    )
    wait_for(lambda: trials(api, 3)[0].runner_state == "RUNNING", timeout=90, what="C running")
    assert trials(api, 2)[0].runner_state != "RUNNING"
    assert [t.runner_state for t in trials(api, 1)].count("RUNNING") == 1
    held = {j["jobId"]: j for j in queue()}["exp-1"]
    assert held["allocatedSlots"] == 1 and held["requestedSlots"] == 2
    assert all(trial_state(t) != "ERROR" for t in trials(api, 1))

    for experiment_id in (1, 2, 3):
        api.KillExperiment(experiment_pb2.KillExperimentRequest(id=experiment_id))
    for experiment_id in (1, 2, 3):
        wait_state(api, experiment_id, "CANCELED", timeout=90)
