"""What the agents are told to run for a trial (allocations/task_spec.py): the trials of one
experiment that start in one pass share what their specs take from its config (worked out once,
placement.py), and each spec still names its own trial, allocation and token."""

from __future__ import annotations

import json

from tests.unit.master.domain.harness import Master, config_text


def test_trials_started_together_share_their_experiments_part_and_keep_their_own(master: Master) -> None:
    master.add_agent("agent-1", slots=2)
    experiment_id = master.create(
        config_text(
            entrypoint=["python3", "train.py"],
            searcher={"name": "grid", "metric": "loss", "max_length": 1},
            hyperparameters={"x": {"type": "categorical", "vals": [1, 2]}},
            environment={"environment_variables": ["MODE=fast"]},
        )
    )
    experiment = master.experiment(experiment_id)
    trials = {t.id: t for t in master.trials(experiment_id)}
    starts = [cmd for _agent, cmd in master.hub.commands("start")]
    assert len(starts) == 2

    storage_root = experiment.config["checkpoint_storage"]["host_path"]
    seen_trials = set()
    for start in starts:
        env = start.spec.environment
        trial = trials[int(env["DET_TRIAL_ID"])]
        seen_trials.add(trial.id)
        assert env["CAIRN_TRIAL_ID"] == env["DET_TRIAL_ID"]
        assert env["DET_ALLOCATION_ID"] == start.allocation_id
        assert json.loads(env["DET_HPARAMS"]) == trial.hparams
        assert env["MODE"] == "fast"
        # The config as stored, and as Determined's harness reads it in a process: its shared_fs
        # storage is a directory at the host path.
        assert json.loads(env["CAIRN_EXPERIMENT_CONFIG"]) == experiment.config
        harness_view = json.loads(env["DET_EXPERIMENT_CONFIG"])
        assert harness_view["checkpoint_storage"]["type"] == "directory"
        assert harness_view["checkpoint_storage"]["container_path"] == storage_root
        assert (list(start.spec.entrypoint), start.spec.shell) == (["python3", "train.py"], False)
        assert [(m.host_path, m.container_path) for m in start.spec.mounts] == [(storage_root, storage_root)]
        assert start.spec.description == f"exp-{experiment_id}-trial-{trial.id}: python3 train.py"
    assert seen_trials == set(trials)
    assert starts[0].spec.environment["DET_SESSION_TOKEN"] != starts[1].spec.environment["DET_SESSION_TOKEN"]
