"""Determined 0.38.1 APIs that answered "no route" before, driven by the stock client on a cluster
of one agent and one slot, as Determined runs its own: the cluster-wide message
(`det master cluster-message set|get|clear`, shown by `det master info` and kept across a master
restart), `feature_switches` in the master config, log fields and log search, the deprecated
per-group metric streams the SDK still reads, and CompareTrials' time series. Judged by end state:
`det` exits 0 after many failures."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.e2e.helpers import trials, wait_state
from tests.support.cluster import TestCluster, running_cluster

FIXTURES = Path(__file__).parent / "fixtures"
DET_TRIAL_DIR = FIXTURES / "det_trial"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def one_slot_cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, its master reading a config file with a feature switch."""
    config = tmp_path / "master.yaml"
    config.write_text("feature_switches: [streaming_updates]\n")
    with running_cluster(
        tmp_path / "cluster", db_url, agents=1, slots=1, extra_env={"CAIRN_MASTER_CONFIG": str(config)}
    ) as cluster:
        yield cluster


def _yaml(text: str) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(text) or {}


def test_cluster_message_and_feature_switches(one_slot_cluster: TestCluster, tmp_path: Path) -> None:
    env = determined_env(one_slot_cluster, tmp_path / "home")
    admin = det_runner(env, "admin")
    user = det_runner(env)

    # feature_switches: in `det master config` (Determined's e2e suite reads them there) and in
    # the master's info (its WebUI reads them there).
    assert _yaml(admin("master", "config", "--yaml"))["feature_switches"] == ["streaming_updates"]
    assert _yaml(user("master", "info", "--yaml"))["featureSwitches"] == ["streaming_updates"]

    # No message: none shown.
    assert _yaml(user("master", "info", "--yaml")).get("clusterMessage") is None
    assert _yaml(admin("master", "cluster-message", "get", "--yaml")).get("clusterMessage") is None

    # Only an admin sets it; a user's attempt changes nothing.
    refused = user("master", "cluster-message", "set", "-m", "from a user", check=False)
    assert "admin" in refused
    assert _yaml(admin("master", "cluster-message", "get", "--yaml")).get("clusterMessage") is None

    admin("master", "cluster-message", "set", "-m", "Maintenance at noon", "-d", "2h")
    got = _yaml(admin("master", "cluster-message", "get", "--yaml"))["clusterMessage"]
    assert got["message"] == "Maintenance at noon"
    start = datetime.fromisoformat(got["startTime"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(got["endTime"].replace("Z", "+00:00"))
    assert end - start == timedelta(hours=2)
    shown = _yaml(user("master", "info", "--yaml"))["clusterMessage"]
    assert shown["message"] == "Maintenance at noon"

    # Bad input is refused naming what is wrong, and the message stays as it was.
    too_long = admin("master", "cluster-message", "set", "-m", "x" * 251, check=False)
    assert "at most 250 characters" in too_long
    past = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert "end_time" in admin("master", "cluster-message", "set", "-m", "late", "-e", past, check=False)
    assert "duration" in admin("master", "cluster-message", "set", "-m", "odd", "-d", "5 days", check=False)
    assert _yaml(user("master", "info", "--yaml"))["clusterMessage"]["message"] == "Maintenance at noon"

    # A later message replaces it; a message that starts later is not shown yet.
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    admin("master", "cluster-message", "set", "-m", "Coming soon", "-s", later)
    assert _yaml(user("master", "info", "--yaml")).get("clusterMessage") is None
    assert (
        _yaml(admin("master", "cluster-message", "get", "--yaml"))["clusterMessage"]["message"]
        == "Coming soon"
    )
    admin("master", "cluster-message", "set", "-m", "Kept across restarts")

    # The message is in the database: a restarted master shows it.
    one_slot_cluster.kill("master")
    one_slot_cluster.restart("master")
    shown = _yaml(user("master", "info", "--yaml"))["clusterMessage"]
    assert shown["message"] == "Kept across restarts" and shown.get("endTime") is None

    admin("master", "cluster-message", "clear")
    assert _yaml(user("master", "info", "--yaml")).get("clusterMessage") is None
    assert _yaml(admin("master", "cluster-message", "get", "--yaml")).get("clusterMessage") is None


def test_an_unknown_feature_switch_stops_the_master_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "master.yaml"
    config.write_text("feature_switches: [streaming_updates, warp_drive]\n")
    started = subprocess.run(
        [sys.executable, "-m", "services.master", "--config-file", str(config), "--state-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode != 0
    assert "feature_switches: unknown switch 'warp_drive'" in started.stderr


def _experiment_config(tmp_path: Path) -> Path:
    path = tmp_path / "series.yaml"
    path.write_text(
        """
name: series
entrypoint: python3 det_core_trial.py
hyperparameters: {steps: 8, step_s: 0.05, increment_by: 2}
searcher: {name: single, metric: x, smaller_is_better: false, max_length: {batches: 8}}
max_restarts: 0
"""
    )
    return path


def test_log_fields_log_search_and_metric_series(one_slot_cluster: TestCluster, tmp_path: Path) -> None:
    env = determined_env(one_slot_cluster, tmp_path / "home")
    det = det_runner(env)
    sdk = sdk_runner(env)
    api = one_slot_cluster.login()
    assert "Created experiment 1" in det(
        "experiment", "create", str(_experiment_config(tmp_path)), str(DET_TRIAL_DIR)
    )
    wait_state(api, 1, "COMPLETED")
    (trial,) = trials(api, 1)

    # Log fields: the distinct values the trial's lines carry, by trial and by its task.
    fields = sdk(
        f"""
session = client._determined._session
by_trial = [f.to_json() for f in bindings.get_TrialLogsFields(session, trialId={trial.id})]
task_id = bindings.get_GetTrial(session, trialId={trial.id}).trial.taskId
by_task = [f.to_json() for f in bindings.get_TaskLogsFields(session, taskId=task_id, follow=True)]
result = {{"trial": by_trial, "task": by_task, "task_id": task_id}}
"""
    )
    (by_trial,) = fields["trial"]
    assert by_trial["stdtypes"] and set(by_trial["stdtypes"]) <= {"stdout", "stderr"}
    assert by_trial["sources"] and by_trial["agentIds"] and by_trial["containerIds"]
    # Followed, the stream ends with the (ended) task and carries the same values.
    assert fields["task"][-1]["agentIds"] == by_trial["agentIds"]
    assert fields["task"][-1]["allocationIds"]
    agent = by_trial["agentIds"][0]
    # What the fields offer filters the logs: the agent's lines are the trial's lines.
    assert "DET-INFO" in det("trial", "logs", str(trial.id), "--agent-id", agent)
    assert "DET-INFO" not in det("trial", "logs", str(trial.id), "--agent-id", "no-such-agent")
    assert "DET-INFO" in det("task", "logs", fields["task_id"], "--agent-id", agent)

    # Log search as the SDK sends it (searchText): only the matching lines.
    found = sdk(f"result = list(client.get_trial({trial.id}).iter_logs(search_text='DET-INFO'))")
    assert found and all("DET-INFO" in line for line in found)

    # The deprecated per-group streams the SDK still reads, and the current one.
    series = sdk(
        f"""
t = client.get_trial({trial.id})
result = {{
    "training": [(m.steps_completed, m.metrics["x"]) for m in t.stream_training_metrics()],
    "validation": [(m.steps_completed, m.metrics["x"]) for m in t.stream_validation_metrics()],
    "group": [m.steps_completed for m in t.iter_metrics("validation")],
    "many": [m.trial_id for m in client.stream_trials_training_metrics([{trial.id}])],
}}
"""
    )
    assert series["training"] == [[step, 2.0 * step] for step in range(1, 9)]
    assert series["validation"] == [[step, 2.0 * step] for step in (2, 4, 6, 8)]
    assert series["group"] == [2, 4, 6, 8] and series["many"] == [trial.id] * 8

    # CompareTrials: downsampled to maxDatapoints, the first and last points kept.
    compared = sdk(
        f"""
session = client._determined._session
resp = bindings.get_CompareTrials(
    session, trialIds=[{trial.id}], metricNames=["x"], maxDatapoints=3,
    metricType=bindings.v1MetricType.TRAINING,
)
(t,) = resp.trials
result = {{
    "trial": t.trial.id,
    "series": [(m.group, [(p.batches, p.values) for p in m.data]) for m in t.metrics],
}}
window = bindings.get_CompareTrials(
    session, trialIds=[{trial.id}], metricIds=["validation.x"], startBatches=4, endBatches=6,
)
result["window"] = [[p.batches for p in m.data] for m in window.trials[0].metrics]
filtered = bindings.get_CompareTrials(
    session, trialIds=[{trial.id}], metricNames=["x"], metricType=bindings.v1MetricType.TRAINING,
    timeSeriesFilter_name="batches", timeSeriesFilter_integerRange_gte=7,
)
result["filtered"] = [[p.batches for p in m.data] for m in filtered.trials[0].metrics]
errors = []
for bad in (dict(maxDatapoints=100000), dict(trialIds=list(range(1, 102)))):
    try:
        bindings.get_CompareTrials(session, **{{"trialIds": [{trial.id}], "metricNames": ["x"], **bad}})
    except Exception as exc:
        errors.append(str(exc))
try:
    list(bindings.get_GetTrainingMetrics(session, trialIds=[]))
except Exception as exc:
    errors.append(str(exc))
result["errors"] = errors
"""
    )
    assert compared["trial"] == trial.id
    ((group, points),) = compared["series"]
    assert group == "training" and len(points) == 3
    assert points[0] == [1, {"x": 2.0}] and points[-1] == [8, {"x": 16.0}]
    assert compared["window"] == [[4, 6]]
    assert compared["filtered"] == [[7, 8]]
    too_many_points, too_many_trials, no_trials = compared["errors"]
    assert "max_datapoints" in too_many_points
    assert "trial_ids: at most 100 trials" in too_many_trials
    assert "trial_ids" in no_trials

    # The deprecated report route: a validation reported through it is read back (as through
    # ReportTrialMetrics, which Cairn's intake serves for both).
    reported = sdk(
        f"""
session = client._determined._session
body = bindings.v1TrialMetrics(
    trialId={trial.id}, trialRunId=1, stepsCompleted=100, metrics=bindings.v1Metrics(avgMetrics={{"x": 1.0}})
)
errors = []
try:
    bindings.post_ReportTrialValidationMetrics(session, body=body, validationMetrics_trialId={trial.id})
except Exception as exc:
    errors.append(str(exc))
result = errors
"""
    )
    steps = sdk(
        f"result = [m.steps_completed for m in client.get_trial({trial.id}).iter_metrics('validation')]"
    )
    assert reported == [] and steps == [2, 4, 6, 8, 100]
