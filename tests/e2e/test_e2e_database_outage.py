"""A PostgreSQL restart in the middle of a search: the master rides it out. No trial fails or
restarts, every metric step is stored exactly once, the agents keep their streams, and no call
fails with UNKNOWN. PostgreSQL only (SQLite has no server to lose), on a server of the test's own."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from cairn.api.v1 import agent_pb2
from tests.e2e.helpers import config, create, ledger, logs, stored_metrics, trial_state, trials, wait_state
from tests.support.cluster import TestCluster, running_cluster
from tests.support.databases import postgres_skipped
from tests.support.polling import wait_for
from tests.support.private_postgres import PrivatePostgres, private_postgres

STEPS = 30
TRIALS = 4
OUTAGE_S = 10


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    if postgres_skipped():
        pytest.skip("CAIRN_TEST_POSTGRES=skip: PostgreSQL tests are not run")
    with private_postgres() as server:
        yield server


@pytest.fixture
def outage_cluster(postgres: PrivatePostgres, tmp_path: Path) -> Iterator[TestCluster]:
    """Two agents of one slot each, their master on the test's own PostgreSQL."""
    with running_cluster(tmp_path / "cluster", postgres.url, agents=2, slots=1) as c:
        yield c


def _running_with_reports(cluster: TestCluster, experiment_id: int) -> bool:
    api = cluster.login()
    running = [t for t in trials(api, experiment_id) if trial_state(t) == "RUNNING"]
    return len(running) == 2 and all(len(stored_metrics(api, t.id, "training")) >= 3 for t in running)


def test_a_postgresql_restart_mid_search_costs_no_trial_and_loses_nothing(
    postgres: PrivatePostgres, outage_cluster: TestCluster
) -> None:
    cluster = outage_cluster
    api = cluster.login()
    experiment_id = create(
        api,
        config(
            hyperparameters={
                "steps": STEPS,
                "step_s": 0.2,
                "ckpt_every": 10,
                "scale": {"type": "double", "minval": 0.5, "maxval": 2.0},
            },
            searcher={
                "name": "random",
                "metric": "validation_loss",
                "max_trials": TRIALS,
                "max_concurrent_trials": 2,
                "max_length": {"batches": STEPS},
            },
            max_restarts=3,
        ),
    )
    wait_for(
        lambda: _running_with_reports(cluster, experiment_id),
        timeout=120,
        what="two trials running and reporting",
    )
    agents_before = {
        (a.id, a.registered_time.ToSeconds()) for a in api.GetAgents(agent_pb2.GetAgentsRequest()).agents
    }
    assert len(agents_before) == 2

    postgres.stop(mode="fast")  # ends every connection of the master at once
    time.sleep(OUTAGE_S)
    postgres.start()

    api = cluster.login()
    wait_state(api, experiment_id, "COMPLETED", timeout=240)
    found = trials(api, experiment_id)
    assert len(found) == TRIALS
    # Not even a restart that does not count against max_restarts (a lost agent's): one run each.
    assert [(trial_state(t), t.restarts, t.run_id) for t in found] == [("COMPLETED", 0, 1)] * TRIALS
    for t in found:
        said = ledger(logs(api, t.id))
        assert said["training"] == [(step, 1) for step in range(1, STEPS + 1)], t.id
        for group in ("training", "validation"):
            stored = [(m.total_batches, m.trial_run_id) for m in stored_metrics(api, t.id, group)]
            # Exactly once: what the trial reported, each step once, none lost, none doubled.
            assert Counter(stored) == Counter(said[group]), (t.id, group)
            assert len(stored) == len(set(stored)) == STEPS, (t.id, group)

    # The agents kept their streams: the same registrations, and no second hello.
    agents_after = api.GetAgents(agent_pb2.GetAgentsRequest()).agents
    assert {(a.id, a.registered_time.ToSeconds()) for a in agents_after} == agents_before
    assert all(a.connected for a in agents_after)
    master_log = cluster.log("master")
    assert master_log.count("agent registered") == 2, "an agent registered again: its stream was closed"
    # The outage reached the master (the test tested something) and it rode it out: no handler
    # failed with an unexpected error (gRPC answers those with UNKNOWN), no agent stream was closed.
    assert "database outage; trying again" in master_log
    assert "Exception calling application" not in master_log
    assert "failed handling a message from an agent" not in master_log
    assert "closing an agent's stream" not in master_log
    for t in found:
        assert not [line for line in logs(api, t.id) if "UNKNOWN" in line], t.id
