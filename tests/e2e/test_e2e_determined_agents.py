"""Disabling and draining agents and slots with Determined's semantics, driven with the stock client
(determined==0.38.1) on a cluster of one agent and one slot, after Determined's own e2e tests
(test_agent_disable.py):

- `det slot disable/enable` flips the slot (GetSlot shows it);
- `det agent disable` (no drain) stops what runs there: a zero-slot command ends, and a trial is
  stopped without counting a restart (max_restarts 0), then resumes once the agent is enabled and
  the experiment completes;
- `det agent disable --drain` lets the running trial finish while nothing new starts there; the
  slot and agent show disabled and draining."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

SESSION = "client._determined._session"
# A trial that runs a while, reporting progress (Determined's no_op single-medium-train-step).
TRIAL = """
import time
import determined as det
with det.core.init() as core:
    for step in range(1, 21):
        time.sleep(0.5)
        core.train.report_training_metrics(steps_completed=step, metrics={"x": float(step)})
    core.train.report_validation_metrics(steps_completed=20, metrics={"x": 1.0})
"""


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, as Determined's own suite runs."""
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def _experiment(det, tmp_path: Path, name: str) -> int:  # type: ignore[no-untyped-def]
    context = tmp_path / f"context-{name}"
    context.mkdir(exist_ok=True)
    (context / "medium.py").write_text(TRIAL)
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        f"name: {name}\nentrypoint: python3 medium.py\nmax_restarts: 0\n"
        "searcher: {name: single, metric: x, max_length: {batches: 20}}\n"
    )
    return int(det("experiment", "create", str(config), str(context)).split()[-1])


def _slots(det) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    return json.loads(det("slot", "list", "--json"))  # type: ignore[no-any-return]


def test_disabling_stops_work_without_counting_and_slots_toggle(cluster: TestCluster, tmp_path: Path) -> None:
    env = determined_env(cluster, tmp_path / "home")
    admin, det, sdk = det_runner(env, "admin"), det_runner(env), sdk_runner(env)
    (slot,) = _slots(det)
    agent_id, slot_id = slot["agent_id"], slot["slot_id"]

    admin("slot", "disable", agent_id, slot_id)
    shown = sdk(
        f"result = bindings.get_GetSlot({SESSION}, agentId={agent_id!r}, slotId={slot_id!r}).slot.enabled"
    )
    admin("slot", "enable", agent_id, slot_id)
    assert shown is False
    assert sdk(
        f"result = bindings.get_GetSlot({SESSION}, agentId={agent_id!r}, slotId={slot_id!r}).slot.enabled"
    )

    # A zero-slot command on the agent ends promptly when the agent is disabled.
    command_id = (
        det("command", "run", "-d", "--config", "resources.slots=0", "sleep", "60").strip().split()[-1]
    )
    wait_for(
        lambda: json.loads(det("command", "list", "--json"))[0]["state"] == "RUNNING",
        timeout=60,
        what="the command to run",
    )
    admin("agent", "disable", agent_id)
    try:
        wait_for(
            lambda: json.loads(det("command", "list", "--json"))[0]["state"] == "TERMINATED",
            timeout=30,
            what="the command to end with its agent disabled",
        )
    finally:
        admin("agent", "enable", agent_id)

    # A trial stopped by a disable (no drain) does not count a restart, and resumes.
    experiment_id = _experiment(det, tmp_path, "resumes")
    wait_for(lambda: _slots(det)[0]["allocation_id"] != "FREE", timeout=60, what="the trial to be placed")
    admin("agent", "disable", agent_id)
    try:
        wait_for(lambda: _slots(det)[0]["allocation_id"] == "FREE", timeout=60, what="the trial to leave")
    finally:
        admin("agent", "enable", agent_id)
    ended = sdk(
        f"exp = client.get_experiment({experiment_id})\n"
        "state = exp.wait(interval=1)\n"
        "(trial,) = exp.list_trials()\n"
        f"result = [state.value, bindings.get_GetTrial({SESSION}, trialId=trial.id).trial.restarts]"
    )
    assert ended == ["STATE_COMPLETED", 0]
    assert command_id


def test_draining_lets_the_running_trial_finish_and_starts_nothing(
    cluster: TestCluster, tmp_path: Path
) -> None:
    env = determined_env(cluster, tmp_path / "home")
    admin, det, sdk = det_runner(env, "admin"), det_runner(env), sdk_runner(env)
    (slot,) = _slots(det)
    agent_id = slot["agent_id"]
    running = _experiment(det, tmp_path, "drained")
    wait_for(lambda: _slots(det)[0]["allocation_id"] != "FREE", timeout=60, what="the trial to be placed")
    admin("agent", "disable", "--drain", agent_id)
    try:
        waiting = _experiment(det, tmp_path, "waits")
        ended = sdk(f"result = client.get_experiment({running}).wait(interval=1).value")
        assert ended == "STATE_COMPLETED"
        (drained,) = _slots(det)
        assert (drained["enabled"], drained["draining"], drained["allocation_id"]) == (False, True, "FREE")
        (agent,) = json.loads(det("agent", "list", "--json"))
        assert (agent["id"], agent["enabled"], agent["draining"]) == (agent_id, False, True)
        # Nothing new started on the draining agent.
        job = sdk(
            f"result = bindings.get_GetExperiment({SESSION}, experimentId={waiting}).jobSummary.state.value"
        )
        assert job == "STATE_QUEUED"
    finally:
        admin("agent", "enable", agent_id)
    # Enabled again, the waiting experiment runs to its end (cleaned up by finishing).
    assert sdk(f"result = client.get_experiment({waiting}).wait(interval=1).value") == "STATE_COMPLETED"
