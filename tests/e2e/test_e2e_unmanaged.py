"""Unmanaged runs (Determined's Core API v2, `determined.experimental.core_v2`): stock scripts run as
plain `python script.py` in the task environment, outside any cluster task, against a one-agent,
one-slot cluster. They report into an unmanaged experiment and trial: metrics, a checkpoint written
to shared_fs storage the script can write, logs; the trial and experiment end COMPLETED, or ERROR on
an exception; the same external ids resume the same experiment; and under torchrun (CPU, gloo, two
processes) both ranks report into one trial. The cluster never schedules any of it. Every check
reads the end state back through the stock `det` CLI, its SDK and Cairn's API."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cairn.api.v1 import job_pb2
from tests.e2e.determined_client import TASK_ENV_BIN, det_runner, determined_env, sdk_runner
from tests.e2e.helpers import experiment, trial_state, trials
from tests.support.cluster import TestCluster, running_cluster

SCRIPT = Path(__file__).parent / "fixtures" / "unmanaged" / "core_v2_run.py"


@pytest.fixture
def one_slot_cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def _run(
    env: dict[str, str], *args: str, torchrun: bool = False, check: bool = True
) -> subprocess.CompletedProcess[str]:
    command = (
        [str(TASK_ENV_BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", str(SCRIPT)]
        if torchrun
        else [str(TASK_ENV_BIN / "python"), str(SCRIPT)]
    )
    done = subprocess.run(
        [*command, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def _starts(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """What each rank printed of where it started (its shipped stdout goes to the master too)."""
    lines = (done.stdout + done.stderr).splitlines()
    return [json.loads(x.split("UNMANAGED-START ", 1)[1]) for x in lines if "UNMANAGED-START " in x]


def _queued(api: Any) -> list[str]:
    return [j.full.entity_id for j in api.GetJobsV2(job_pb2.GetJobsV2Request(resource_pool="default")).jobs]


def _client(cluster: TestCluster, tmp_path: Path) -> tuple[dict[str, str], Any, Any, Any, Path]:
    env = determined_env(cluster, tmp_path / "home")
    det = det_runner(env)  # logs the user in: the scripts use its cached session
    storage = tmp_path / "checkpoints"
    storage.mkdir()
    return env, det, sdk_runner(env), cluster.login(), storage


def test_unmanaged_runs_report_resume_and_fail(one_slot_cluster: TestCluster, tmp_path: Path) -> None:
    env, det, sdk, api, storage = _client(one_slot_cluster, tmp_path)

    # A singleton run: metrics, a checkpoint, COMPLETED.
    done = _run(env, "--name", "single", "--storage", str(storage), "--steps", "3")
    (start,) = _starts(done)
    exp_id, trial_id = start["experiment_id"], start["trial_id"]
    assert start["steps_completed"] == 0 and start["latest_checkpoint"] is None
    exp = experiment(api, exp_id)
    assert exp.unmanaged and exp.name == "single"
    assert exp.state == exp.STATE_COMPLETED
    (t,) = trials(api, exp_id)
    assert t.id == trial_id and trial_state(t) == "COMPLETED"
    assert t.total_batches_processed == 3

    described = det("experiment", "describe", str(exp_id))
    assert "COMPLETED" in described and "single" in described
    read = sdk(
        f"""
exp = client.get_experiment({exp_id})
trial = exp.get_trials()[0]
ck = trial.list_checkpoints()
result = {{
    "state": exp.state.value,
    "trial_state": trial.state.value,
    "training": [(m.steps_completed, m.metrics["loss"]) for m in trial.iter_metrics("training")],
    "validation": [m.metrics["accuracy"] for m in trial.iter_metrics("validation")],
    "checkpoints": [(c.uuid, c.metadata.get("steps_completed")) for c in ck],
    "hparams": trial.hparams,
}}
"""
    )
    assert read["state"] == "STATE_COMPLETED" and read["trial_state"] == "STATE_COMPLETED"
    assert [step for step, _ in read["training"]] == [1, 2, 3]
    assert read["validation"] == [pytest.approx(0.53)]
    assert read["hparams"] == {"lr": 0.01, "layers": 2}
    ((ck_uuid, ck_steps),) = read["checkpoints"]
    assert ck_steps == 3
    assert (storage / ck_uuid / "weights-rank0.txt").read_text() == "step 3\n"
    logs = det("trial", "logs", str(trial_id))
    assert "trained step 3" in logs and "rank 0 done" in logs

    # Listed as an unmanaged experiment; the cluster never queued it.
    assert "single" in det("experiment", "list")
    listed = sdk(
        "result = [(e.id, e.unmanaged) for e in "
        "bindings.get_GetExperiments(client._determined._session).experiments]"
    )
    assert [exp_id, True] in listed
    assert _queued(api) == []

    # External ids: the first run creates; a re-run resumes the same experiment and trial.
    ids = ["--external-experiment-id", "resumable-exp", "--external-trial-id", "trial-a"]
    first = _starts(_run(env, "--name", "resumable", "--storage", str(storage), "--steps", "2", *ids))[0]
    again = _starts(_run(env, "--name", "resumable", "--storage", str(storage), "--steps", "2", *ids))[0]
    assert (again["experiment_id"], again["trial_id"]) == (first["experiment_id"], first["trial_id"])
    assert again["steps_completed"] == 2 and again["latest_checkpoint"]
    resumed = experiment(api, first["experiment_id"])
    assert resumed.state == resumed.STATE_COMPLETED and resumed.num_trials == 1
    (rt,) = trials(api, first["experiment_id"])
    assert trial_state(rt) == "COMPLETED" and rt.total_batches_processed == 4
    steps = sdk(
        f"""
trial = client.get_trial({first["trial_id"]})
result = sorted(m.steps_completed for m in trial.iter_metrics("training"))
"""
    )
    assert steps == [1, 2, 3, 4]

    # An exception ends the trial and the experiment in ERROR.
    failed = _run(env, "--name", "failing", "--storage", str(storage), "--fail", check=False)
    assert failed.returncode != 0 and "failed on purpose" in failed.stderr
    (fs,) = _starts(failed)
    errored = experiment(api, fs["experiment_id"])
    assert errored.state == errored.STATE_ERROR
    (ft,) = trials(api, fs["experiment_id"])
    assert trial_state(ft) == "ERROR"

    assert _queued(api) == []


def test_an_unmanaged_run_under_torchrun(one_slot_cluster: TestCluster, tmp_path: Path) -> None:
    """torchrun, two CPU processes on gloo: one experiment, one trial, both ranks in it."""
    env, det, sdk, api, storage = _client(one_slot_cluster, tmp_path)
    dist = _run(
        env,
        "--name",
        "distributed",
        "--storage",
        str(storage),
        "--steps",
        "2",
        "--distributed",
        torchrun=True,
    )
    starts = _starts(dist)
    assert sorted(s["rank"] for s in starts) == [0, 1]
    assert len({(s["experiment_id"], s["trial_id"]) for s in starts}) == 1
    dexp = experiment(api, starts[0]["experiment_id"])
    assert dexp.state == dexp.STATE_COMPLETED and dexp.num_trials == 1
    (dt,) = trials(api, dexp.id)
    assert trial_state(dt) == "COMPLETED" and dt.total_batches_processed == 2
    dck = sdk(
        f"""
trial = client.get_trial({dt.id})
result = [(c.uuid, sorted(c.resources)) for c in trial.list_checkpoints()]
"""
    )
    ((duuid, files),) = dck
    assert {"weights-rank0.txt", "weights-rank1.txt"} <= set(files)
    assert (storage / duuid / "weights-rank1.txt").exists()
    dlogs = det("trial", "logs", str(dt.id))
    assert "rank 0 done" in dlogs and "rank 1 done" in dlogs

    # Still nothing was ever queued for the agent.
    assert _queued(api) == []
