"""Processes dying under a running experiment: the master (kill -9) and an agent. Nothing the
master acknowledged is lost, running trials are reattached, and nothing is counted twice."""

from __future__ import annotations

import signal
from collections import Counter

import pytest

from cairn.api.v1 import agent_pb2
from tests.e2e.helpers import config, create, ledger, logs, stored_metrics, trials, wait_state
from tests.support.cluster import TestCluster
from tests.support.polling import wait_for

# A master and an agent killed and restarted: the master's state comes back from its database.
pytestmark = pytest.mark.on_each_database


def test_master_kill_9_keeps_the_running_trial_and_every_metric(cluster: TestCluster) -> None:
    api = cluster.login()
    experiment_id = create(api, config(hyperparameters={"steps": 40, "step_s": 0.1, "ckpt_every": 5}))
    trial_id = wait_for(lambda: trials(api, experiment_id), timeout=30, what="trial")[0].id
    wait_for(lambda: len(stored_metrics(api, trial_id, "training")) >= 5, timeout=60, what="first reports")
    allocation_before = trials(api, experiment_id)[0].allocation_id

    cluster.kill("master", signal.SIGKILL)
    cluster.restart("master")
    api = cluster.login()

    wait_state(api, experiment_id, "COMPLETED", timeout=120)
    trial = trials(api, experiment_id)[0]
    # The same allocation finished the work: the trial kept running while the master was away.
    assert trial.allocation_id == allocation_before and trial.restarts == 0 and trial.run_id == 1
    said = ledger(logs(api, trial_id))
    for group in ("training", "validation"):
        stored = [(m.total_batches, m.trial_run_id) for m in stored_metrics(api, trial_id, group)]
        assert Counter(stored) == Counter(said[group]), group
    assert [s for s, _ in said["training"]] == list(range(1, 41))
    agents = api.GetAgents(agent_pb2.GetAgentsRequest()).agents
    assert [a.connected for a in agents] == [True]


def test_agent_kill_9_and_restart_reattaches_its_trial(cluster: TestCluster) -> None:
    api = cluster.login()
    experiment_id = create(api, config(hyperparameters={"steps": 30, "step_s": 0.1, "ckpt_every": 5}))
    trial_id = wait_for(lambda: trials(api, experiment_id), timeout=30, what="trial")[0].id
    wait_for(lambda: len(stored_metrics(api, trial_id, "training")) >= 5, timeout=60, what="first reports")
    allocation_before = trials(api, experiment_id)[0].allocation_id

    cluster.kill("agent-1", signal.SIGKILL)  # the trial's supervisor lives on in its own session
    cluster.restart("agent-1")

    wait_state(api, experiment_id, "COMPLETED", timeout=120)
    trial = trials(api, experiment_id)[0]
    assert trial.allocation_id == allocation_before and trial.restarts == 0
    said = ledger(logs(api, trial_id))
    stored = [(m.total_batches, m.trial_run_id) for m in stored_metrics(api, trial_id, "training")]
    assert Counter(stored) == Counter(said["training"])
    assert [s for s, _ in said["training"]] == list(range(1, 31))
    # Every log line the trial wrote was shipped once, across the agent's restart.
    ledger_lines = [line for line in logs(api, trial_id) if line.startswith("LEDGER")]
    assert len(ledger_lines) == len(set(ledger_lines)) == 30 + 30
