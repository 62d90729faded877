"""Warm trial starts end to end (environment.preload_modules): a real master, agent and trials; every
trial runs in a prepared interpreter (the first on each slot waits for its standby), reports exactly
once, and pauses, resumes from its checkpoint and completes as cold ones do."""

from __future__ import annotations

from collections import Counter

from cairn.api.v1 import experiment_pb2
from tests.e2e.helpers import (
    config,
    create,
    ledger,
    logs,
    stored_metrics,
    trial_state,
    trials,
    wait_state,
)
from tests.support.cluster import TestCluster
from tests.support.polling import wait_for

WARM_NOTE = "warm start: the command runs in an interpreter prepared with its modules imported"
# Light enough for a test; what matters is that the trial finds it imported.
PRELOAD = {"preload_modules": ["json"]}


def test_every_trial_starts_warm_and_reports_exactly_once(cluster: TestCluster) -> None:
    api = cluster.login()
    text = config(
        hyperparameters={"steps": 4, "step_s": 0.02, "val_every": 2},
        searcher={
            "name": "random",
            "metric": "validation_loss",
            "max_trials": 6,
            "max_length": {"batches": 4},
        },
        environment=PRELOAD,
    )
    experiment_id = create(api, text)
    wait_state(api, experiment_id, "COMPLETED", timeout=180)
    found = trials(api, experiment_id)
    assert len(found) == 6 and all(trial_state(t) == "COMPLETED" for t in found)
    warm = 0
    for t in found:
        lines = logs(api, t.id)
        warm += WARM_NOTE in lines
        said = ledger(lines)
        for group in ("training", "validation"):
            stored = [(m.total_batches, m.trial_run_id) for m in stored_metrics(api, t.id, group)]
            assert Counter(stored) == Counter(said[group]), (t.id, group)
    # Two slots: the first trial on each waits for the standby started for it (its kind's zygote
    # importing first); later ones find the one prepared after their predecessor's launch.
    assert warm == 6, warm


def test_a_paused_warm_trial_resumes_from_its_checkpoint(cluster: TestCluster) -> None:
    api = cluster.login()
    text = config(hyperparameters={"steps": 30, "step_s": 0.1, "ckpt_every": 5}, environment=PRELOAD)
    experiment_id = create(api, text)
    trial_id = wait_for(lambda: trials(api, experiment_id), timeout=30, what="trial")[0].id
    wait_for(lambda: len(stored_metrics(api, trial_id, "training")) >= 7, timeout=60, what="some steps")
    api.PauseExperiment(experiment_pb2.PauseExperimentRequest(id=experiment_id))
    wait_for(
        lambda: trials(api, experiment_id)[0].runner_state == "TERMINATED", timeout=60, what="graceful stop"
    )
    preempted_at = int(next(line.split()[1] for line in logs(api, trial_id) if line.startswith("PREEMPTED")))

    api.ActivateExperiment(experiment_pb2.ActivateExperimentRequest(id=experiment_id))
    wait_state(api, experiment_id, "COMPLETED", timeout=120)
    lines = logs(api, trial_id)
    # The resumed run found the standby the first run left behind.
    assert WARM_NOTE in lines[lines.index(f"PREEMPTED {preempted_at}") :]
    assert f"RESUMED {preempted_at}" in lines
    stored = sorted(m.total_batches for m in stored_metrics(api, trial_id, "training"))
    assert stored == list(range(1, 31))
    assert trials(api, experiment_id)[0].restarts == 0
