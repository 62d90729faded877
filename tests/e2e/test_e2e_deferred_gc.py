"""Checkpoint GC owed while the checkpoint service is down runs once it is back, without a master
restart, and leaves exactly what the policy keeps (issue 17: it used to be tried once, then only at
the next master start)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from cairn.api.v1 import checkpoint_pb2
from cairn.localcluster.processes import is_running
from cairn.localcluster.record import load_record
from tests.e2e.helpers import config, create, experiment, logs, trials, wait_state
from tests.support.cluster import TestCluster
from tests.support.polling import wait_for

STEPS = 4


def _stop_watchdog(cluster: TestCluster) -> None:
    """The cluster's watchdog (if this cluster has one) would bring the checkpoint service back on
    its own schedule; this test brings it back at the moment it chooses."""
    record = load_record(cluster.state_dir / "cluster.json")
    assert record is not None
    for pid in [p.pid for p in record.processes if p.role == "watchdog" and is_running(p.pid)]:
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not is_running(pid), timeout=20, what="the watchdog to stop")  # noqa: B023


def test_gc_owed_while_the_checkpoint_service_is_down_runs_when_it_is_back(cluster: TestCluster) -> None:
    api = cluster.login()
    master_pid = cluster.process("master").pid
    _stop_watchdog(cluster)
    cluster.kill("checkpoint")

    text = config(
        hyperparameters={
            "steps": STEPS,
            "step_s": 0.02,
            "ckpt_every": 1,
            "best_step": {"type": "categorical", "vals": [2, 4]},
            "scale": {"type": "categorical", "vals": [1.0, 3.0]},
        },
        searcher={"name": "grid", "metric": "validation_loss", "max_length": {"batches": STEPS}},
        checkpoint_storage={"save_experiment_best": 1, "save_trial_best": 0, "save_trial_latest": 1},
    )
    experiment_id = create(api, text)
    wait_state(api, experiment_id, "COMPLETED", timeout=180)
    found = trials(api, experiment_id)
    assert len(found) == 4

    def kept() -> set[tuple[int, int]]:
        response = api.GetExperimentCheckpoints(
            checkpoint_pb2.GetExperimentCheckpointsRequest(
                id=experiment_id, states=[checkpoint_pb2.Checkpoint.STATE_COMPLETED]
            )
        )
        return {
            (c.training.trial_id, int(c.metadata["steps_completed"]))
            for c in response.checkpoints
            if c.state != checkpoint_pb2.Checkpoint.STATE_DELETED  # GC's, kept DELETED as on Determined
        }

    # The GC its end owed fails while the service is down, and is kept owed: nothing collected.
    def gc_failed() -> bool:
        return any(
            "deferred work failed" in line and "checkpoint_gc" in line
            for line in cluster.log("master").splitlines()
        )

    wait_for(gc_failed, timeout=30, what="a failed GC attempt in the master's log")
    assert len(kept()) == 4 * STEPS

    # The service comes back as the cluster started it (same command, port and token).
    cluster.restart("checkpoint")

    # Every trial's latest checkpoint, plus the experiment's best (best_step 2 with scale 1).
    best = min(found, key=lambda t: t.searcher_metric_value)
    assert (best.hparams["best_step"], best.hparams["scale"]) == (2, 1.0)
    expected = {(t.id, STEPS) for t in found} | {(best.id, 2)}
    wait_for(
        lambda: kept() == expected,
        timeout=120,
        what=f"GC to keep {sorted(expected)} (keeps {sorted(kept())})",
    )
    response = api.GetExperimentCheckpoints(
        checkpoint_pb2.GetExperimentCheckpointsRequest(
            id=experiment_id, states=[checkpoint_pb2.Checkpoint.STATE_COMPLETED]
        )
    )
    storage: Any = experiment(api, experiment_id).config["checkpoint_storage"]
    host_path = Path(storage["host_path"])
    on_disk = {p.name for p in host_path.iterdir() if p.is_dir() and not p.name.startswith(".")}
    reported = {line.split()[2] for t in found for line in logs(api, t.id) if line.startswith("CHECKPOINT")}
    assert len(reported) == 4 * STEPS
    assert reported & on_disk == {
        c.uuid for c in response.checkpoints if c.state != checkpoint_pb2.Checkpoint.STATE_DELETED
    }
    # Without a master restart.
    assert cluster.process("master").pid == master_pid and is_running(master_pid)
