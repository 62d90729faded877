"""Determined's derived experiment and trial states, driven with the stock client (determined==0.38.1)
on a cluster of one agent and one slot, judged by Determined's own waiting rule (its e2e
tests/experiment/experiment.py `wait_for_experiment_state`: poll GetExperiment until the state is
the target; a terminal state fails the wait):

- while a command holds the only slot, an experiment is stored ACTIVE and answered QUEUED, its
  trial too, and `det experiment list` shows it QUEUED;
- once the command is killed it is placed and answered RUNNING (GetTrial RUNNING, one active
  trial as Determined's `num_active_trials` counts), `det experiment list` shows it RUNNING, and
  GetExperiments' `states` filter compares the stored state as Determined's does (ACTIVE finds it,
  RUNNING does not);
- pause → PAUSED, activate → QUEUED/RUNNING again, and it completes COMPLETED."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

STEPS = 160
# A trial that runs a while (STEPS × 0.25 s), stops at a pause with a checkpoint and resumes from it.
TRIAL = f"""
import json, pathlib, time
import determined as det
info = det.get_cluster_info()
with det.core.init() as core:
    step = 0
    if info.latest_checkpoint is not None:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            step = json.loads((pathlib.Path(path) / "state").read_text())["step"]
    while step < {STEPS}:
        time.sleep(0.25)
        step += 1
        core.train.report_training_metrics(steps_completed=step, metrics={{"x": float(step)}})
        if core.preempt.should_preempt():
            with core.checkpoint.store_path({{"steps_completed": step}}) as (path, _uuid):
                (path / "state").write_text(json.dumps({{"step": step}}))
            raise SystemExit(0)
    core.train.report_validation_metrics(steps_completed=step, metrics={{"x": 1.0}})
"""

# Determined's own waiting rule, run in the stock SDK's process.
WAITING = """
import time
sess = client._determined._session
S = bindings.experimentv1State
T = bindings.trialv1State
TERMINAL = (S.CANCELED, S.COMPLETED, S.ERROR)

def experiment_state(exp_id):
    return bindings.get_GetExperiment(sess, experimentId=exp_id).experiment.state

def wait_for_experiment_state(exp_id, target, max_wait_secs=300):
    for _ in range(max_wait_secs):
        state = experiment_state(exp_id)
        if state == target:
            return
        if state in TERMINAL:
            raise AssertionError(f"experiment {exp_id} terminated {state.value}, expected {target.value}")
        time.sleep(1)
    state = experiment_state(exp_id)
    raise AssertionError(f"experiment {exp_id} did not reach {target.value} (is {state.value})")

def only_trial(exp_id, max_wait_secs=120):
    for _ in range(max_wait_secs):
        trials = bindings.get_GetExperimentTrials(sess, experimentId=exp_id).trials
        if trials:
            return trials[0].id
        time.sleep(1)
    raise AssertionError(f"experiment {exp_id} has no trial")

def trial_state(trial_id):
    return bindings.get_GetTrial(sess, trialId=trial_id).trial.state

def num_active_trials(exp_id):
    return sum(
        1
        for t in bindings.get_GetExperimentTrials(sess, experimentId=exp_id).trials
        if trial_state(t.id) in (T.RUNNING, T.STARTING, T.PULLING)
    )
"""


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, as Determined's own suite runs."""
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def listed_state(det: Callable[..., str], experiment_id: int) -> str:
    """The State column of the experiment's row in `det experiment list`'s table."""
    lines = det("experiment", "list").splitlines()
    header = [cell.strip() for cell in lines[0].split("|")]
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.split("|")]
        if cells and cells[0] == str(experiment_id):
            return cells[header.index("State")]
    raise AssertionError(f"experiment {experiment_id} not listed:\n" + "\n".join(lines))


def test_an_experiment_waits_queued_runs_pauses_resumes_and_completes(
    cluster: TestCluster, tmp_path: Path
) -> None:
    env = determined_env(cluster, tmp_path / "home")
    det, sdk = det_runner(env), sdk_runner(env)

    def waiting(code: str) -> Any:
        return sdk(WAITING + code)

    context = tmp_path / "context"
    context.mkdir()
    (context / "steps.py").write_text(TRIAL)
    config = tmp_path / "states.yaml"
    config.write_text(
        "name: states\nentrypoint: python3 steps.py\nmax_restarts: 0\n"
        f"searcher: {{name: single, metric: x, max_length: {{batches: {STEPS}}}}}\n"
    )

    # A command holds the only slot.
    command_id = det("command", "run", "-d", "--config", "resources.slots=1", "sleep", "600").split()[-1]
    experiment_id: int | None = None
    try:
        wait_for(
            lambda: [c["state"] for c in json.loads(det("command", "list", "--json"))] == ["RUNNING"],
            timeout=120,
            what="the command to hold the slot",
        )
        experiment_id = int(det("experiment", "create", str(config), str(context)).split()[-1])

        queued = waiting(
            f"wait_for_experiment_state({experiment_id}, S.QUEUED)\n"
            f"trial_id = only_trial({experiment_id})\n"
            "time.sleep(3)  # a while later it still waits: nothing of it runs\n"
            f"result = [experiment_state({experiment_id}).value, trial_state(trial_id).value, "
            f"num_active_trials({experiment_id})]"
        )
        assert queued == ["STATE_QUEUED", "STATE_QUEUED", 0]
        assert listed_state(det, experiment_id) == "QUEUED"

        det("command", "kill", command_id)
        running = waiting(
            f"wait_for_experiment_state({experiment_id}, S.RUNNING)\n"
            f"trial_id = only_trial({experiment_id})\n"
            "active = [e.id for e in bindings.get_GetExperiments(sess, states=[S.ACTIVE]).experiments]\n"
            "derived = [e.id for e in bindings.get_GetExperiments(sess, states=[S.RUNNING]).experiments]\n"
            f"result = [trial_state(trial_id).value, num_active_trials({experiment_id}), active, derived]"
        )
        assert running == ["STATE_RUNNING", 1, [experiment_id], []]
        assert listed_state(det, experiment_id) == "RUNNING"

        # Pausing a RUNNING experiment is ACTIVE → PAUSED; activating answers QUEUED/RUNNING again.
        det("experiment", "pause", str(experiment_id))
        paused = waiting(
            f"wait_for_experiment_state({experiment_id}, S.PAUSED)\n"
            f"result = trial_state(only_trial({experiment_id})).value"
        )
        assert paused == "STATE_PAUSED"
        det("experiment", "activate", str(experiment_id))
        resumed = waiting(
            f"state = experiment_state({experiment_id})\n"
            f"wait_for_experiment_state({experiment_id}, S.RUNNING)\n"
            "result = state.value"
        )
        assert resumed in ("STATE_QUEUED", "STATE_PULLING", "STATE_STARTING", "STATE_RUNNING")

        ended = sdk(f"result = client.get_experiment({experiment_id}).wait(interval=1).value")
        assert ended == "STATE_COMPLETED"
        assert listed_state(det, experiment_id) == "COMPLETED"
        experiment_id = None
    finally:
        # What the test started ends with it, whatever failed.
        det("command", "kill", command_id, check=False)
        if experiment_id is not None:
            det("experiment", "kill", str(experiment_id), check=False)
