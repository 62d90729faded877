"""Experiment lifecycle details as Determined 0.38.1 has them, driven with the stock client on a
cluster of one agent and one slot, judged by the end state: `det experiment continue` retries the
trials of a grid or random search that did not complete, keeping the completed ones."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import DET_TRIAL_DIR, det_core_config, logs, trial_state, trials, wait_state
from tests.support.cluster import AuthedStub
from tests.support.polling import wait_for

# One agent with one slot, as Determined's own suite runs (tests/e2e/conftest.py).
pytestmark = pytest.mark.one_slot


def _search_config(tmp_path: Path, name: str, searcher: dict[str, Any], fail_at: Any) -> Path:
    """det_core_trial.py for 6 batches (checkpoints at 3 and 6), failing at batch 4 on a first run
    when its `fail_first_run_at` is 4 (0: never); no restarts, so a failure ends the trial."""
    return det_core_config(tmp_path, name, hyperparameters={"fail_first_run_at": fail_at}, searcher=searcher)


def test_continue_retries_a_searchs_failed_trials_and_keeps_the_completed_ones(
    det: Callable[..., str], sdk: Callable[[str], Any], api: AuthedStub, tmp_path: Path
) -> None:
    grid = _search_config(tmp_path, "grid", {"name": "grid"}, {"type": "categorical", "vals": [0, 4]})
    # Every random trial fails on its first run: the search ends in ERROR.
    random = _search_config(tmp_path, "random", {"name": "random", "max_trials": 2}, 4)
    assert "Created experiment 1" in det("experiment", "create", str(grid), str(DET_TRIAL_DIR))
    assert "Created experiment 2" in det("experiment", "create", str(random), str(DET_TRIAL_DIR))
    wait_state(api, 1, "COMPLETED", timeout=300)
    wait_state(api, 2, "ERROR", timeout=300)
    before = {t.id: t for t in trials(api, 1)}
    by_hparam = {int(t.hparams["fail_first_run_at"]): t for t in before.values()}
    kept, failed = by_hparam[0], by_hparam[4]
    assert (trial_state(kept), trial_state(failed)) == ("COMPLETED", "ERROR")
    assert [trial_state(t) for t in trials(api, 2)] == ["ERROR", "ERROR"]

    assert "Continued experiment 1" in det("experiment", "continue", "1")
    assert "Continued experiment 2" in det("experiment", "continue", "2")
    wait_state(api, 1, "COMPLETED", timeout=300)
    wait_state(api, 2, "COMPLETED", timeout=300)

    # No new trial: the failed one ran again from its checkpoint at 3, the completed one did not.
    after = {t.id: t for t in trials(api, 1)}
    assert set(after) == set(before)
    assert [trial_state(t) for t in after.values()] == ["COMPLETED", "COMPLETED"]
    failed_logs = logs(api, failed.id)
    assert any("DET-RESUMED 3" in line for line in failed_logs)
    assert sum("DET-DONE" in line for line in failed_logs) == 1
    assert sum("DET-INFO" in line for line in logs(api, kept.id)) == 1
    assert after[kept.id].end_time == kept.end_time
    assert [trial_state(t) for t in trials(api, 2)] == ["COMPLETED", "COMPLETED"]
    assert len(trials(api, 2)) == 2

    # As the stock SDK and CLI read them: restarts counted from zero, every trial ended.
    seen = sdk(
        "result = sorted((t.id, t.state.value, t.hparams['fail_first_run_at']) "
        "for t in client.get_experiment(1).list_trials())"
    )
    assert seen == sorted([[kept.id, "STATE_COMPLETED", 0], [failed.id, "STATE_COMPLETED", 4]])
    described = json.loads(det("trial", "describe", str(failed.id), "--json"))
    assert described["trial"]["state"] == "STATE_COMPLETED"
    assert described["trial"]["restarts"] == 0 and described["trial"]["endTime"]
    # Everything completed now: nothing is left to retry.
    refused = det("experiment", "continue", "1", check=False)
    assert "has been completed" in refused and "Continued experiment" not in refused


def test_create_in_test_mode_validates_then_runs_a_one_batch_trial(
    det: Callable[..., str], sdk: Callable[[str], Any], api: AuthedStub, tmp_path: Path
) -> None:
    config = tmp_path / "search.yaml"
    config.write_text(
        """
name: tested
description: a search
entrypoint: python3 det_core_trial.py
hyperparameters:
  step_s: 0.05
  increment_by: {type: double, minval: 1, maxval: 2}
searcher: {name: random, metric: x, smaller_is_better: false, max_trials: 5, max_length: {batches: 50}}
max_restarts: 3
"""
    )
    out = det("experiment", "create", "--test", str(config), str(DET_TRIAL_DIR))
    # The stock CLI validates (creating nothing), then creates a one-batch single-trial copy and
    # follows it to its end.
    assert "Experiment configuration validation succeeded" in out
    assert "Created test experiment 1" in out
    assert "Model definition test succeeded" in out
    assert sdk("result = [e.id for e in client.list_experiments()]") == [1]
    wait_state(api, 1, "COMPLETED")
    exp_config = sdk("result = client.get_experiment(1).config")
    assert exp_config["searcher"]["name"] == "single" and exp_config["max_restarts"] == 0
    assert exp_config["searcher"]["max_length"] == {"batches": 1}
    assert exp_config["description"] == "[test-mode] a search"
    (trial,) = trials(api, 1)
    assert trial_state(trial) == "COMPLETED" and trial.total_batches_processed == 1

    # An invalid config is refused by the validation, and nothing is created.
    config.write_text(config.read_text().replace("max_trials: 5", "max_trials: -5"))
    refused = det("experiment", "create", "--test", str(config), str(DET_TRIAL_DIR), check=False)
    assert "Created test experiment" not in refused and "max_trials" in refused
    assert sdk("result = [e.id for e in client.list_experiments()]") == [1]


def test_an_experiment_created_paused_has_paused_trials_until_activated(
    det: Callable[..., str], sdk: Callable[[str], Any], api: AuthedStub, tmp_path: Path
) -> None:
    grid = _search_config(tmp_path, "grid", {"name": "grid"}, {"type": "categorical", "vals": [0, 0]})
    assert "Created experiment 1" in det("experiment", "create", "--paused", str(grid), str(DET_TRIAL_DIR))
    trial_states = "result = [t.state.value for t in client.get_experiment(1).list_trials()]"
    assert sdk("result = client.get_experiment(1).state.value") == "STATE_PAUSED"
    assert sdk(trial_states) == ["STATE_PAUSED", "STATE_PAUSED"]
    # Nothing runs while it is paused (its trials have no logs), and pausing again is no change.
    det("experiment", "pause", "1")
    assert all(logs(api, t.id) == [] for t in trials(api, 1))

    det("experiment", "activate", "1")
    wait_state(api, 1, "COMPLETED", timeout=300)
    assert sdk(trial_states) == ["STATE_COMPLETED", "STATE_COMPLETED"]


IGNORES_PREEMPTION = """\
import signal, sys, time

# Never asks whether it should stop, and ignores SIGTERM: only a kill ends it.
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("SLEEPER STARTED", flush=True)
while True:
    time.sleep(0.5)
"""


def test_a_trial_ignoring_preemption_ends_when_killed_or_at_its_preemption_timeout(
    det: Callable[..., str], api: AuthedStub, tmp_path: Path
) -> None:
    context = tmp_path / "sleeper"
    context.mkdir()
    (context / "sleep.py").write_text(IGNORES_PREEMPTION)

    def create(name: str, extra: str) -> None:
        config = tmp_path / f"{name}.yaml"
        config.write_text(
            f"name: {name}\nentrypoint: python3 sleep.py\nmax_restarts: 0\n{extra}"
            "searcher: {name: single, metric: x, max_length: {batches: 1}}\n"
        )
        det("experiment", "create", str(config), str(context))

    def started(experiment_id: int) -> bool:
        return any("SLEEPER STARTED" in line for t in trials(api, experiment_id) for line in logs(api, t.id))

    # Determined's test_kill_experiment_ignoring_preemption: a cancel waits on the trial, which
    # ignores it; a kill then ends it, CANCELED.
    create("killed", "")
    wait_for(lambda: started(1), timeout=120, what="the first sleeper to start")
    det("experiment", "cancel", "1")
    wait_state(api, 1, "STOPPING_CANCELED")
    det("experiment", "kill", "1")
    wait_state(api, 1, "CANCELED", timeout=120)
    assert [trial_state(t) for t in trials(api, 1)] == ["CANCELED"]

    # Canceled only: the master kills it once its preemption timeout has passed.
    create("timed-out", "preemption_timeout: 3\n")
    wait_for(lambda: started(2), timeout=120, what="the second sleeper to start")
    det("experiment", "cancel", "2")
    wait_state(api, 2, "CANCELED", timeout=120)
    assert [trial_state(t) for t in trials(api, 2)] == ["CANCELED"]


def _single_config(tmp_path: Path, name: str, length: int, **searcher: Any) -> Path:
    return det_core_config(tmp_path, name, searcher={"max_length": {"batches": length}, **searcher})


def test_a_warm_started_trial_records_and_starts_from_its_source_checkpoint(
    det: Callable[..., str], sdk: Callable[[str], Any], api: AuthedStub, tmp_path: Path
) -> None:
    det("experiment", "create", str(_single_config(tmp_path, "source", 6)), str(DET_TRIAL_DIR))
    wait_state(api, 1, "COMPLETED", timeout=300)
    (source,) = trials(api, 1)
    at_3, at_6 = [line.split()[1:] for line in logs(api, source.id) if "DET-CHECKPOINT" in line]
    assert (at_3[0], at_6[0]) == ("3", "6")

    by_trial = _single_config(tmp_path, "by-trial", 9, source_trial_id=source.id)
    det("experiment", "create", str(by_trial), str(DET_TRIAL_DIR))
    by_uuid = _single_config(tmp_path, "by-uuid", 9, source_checkpoint_uuid=at_6[1])
    det("experiment", "create", str(by_uuid), str(DET_TRIAL_DIR))
    wait_state(api, 2, "COMPLETED", timeout=300)
    wait_state(api, 3, "COMPLETED", timeout=300)
    ((from_trial,), (from_uuid,)) = trials(api, 2), trials(api, 3)
    # Each started from its source: the latest checkpoint of the trial (the one at 3 was collected
    # when the source ended, by the default policy), or the one named.
    assert any("DET-RESUMED 6" in line for line in logs(api, from_trial.id))
    assert any("DET-RESUMED 6" in line for line in logs(api, from_uuid.id))

    # As the stock CLI and SDK read them; a cold start records none.
    shown = json.loads(det("trial", "describe", str(from_trial.id), "--json"))
    assert shown["trial"]["warmStartCheckpointUuid"] == at_6[1]
    read = (
        "result = bindings.get_GetTrial(client._determined._session, trialId={})"
        ".trial.warmStartCheckpointUuid"
    )
    assert sdk(read.format(from_uuid.id)) == at_6[1]
    assert sdk(read.format(source.id)) == ""

    # A source trial that does not exist is refused, naming the field; nothing is created.
    missing = _single_config(tmp_path, "missing", 3, source_trial_id=999)
    refused = det("experiment", "create", str(missing), str(DET_TRIAL_DIR), check=False)
    assert "searcher.source_trial_id: no trial 999" in refused and "Created experiment" not in refused
    assert sdk("result = [e.id for e in client.list_experiments()]") == [1, 2, 3]


NON_FINITE_TRIAL = """\
import math

import determined as det

with det.core.init() as core:
    core.train.report_training_metrics(steps_completed=1, metrics={"loss": math.nan, "grad": math.inf})
    core.train.report_validation_metrics(
        steps_completed=1, metrics={"x": math.nan, "top": math.inf, "low": -math.inf}
    )
    core.train.report_validation_metrics(steps_completed=2, metrics={"x": 0.5, "top": 1.0, "low": 0.0})
    print("NON-FINITE REPORTED", flush=True)
"""


def test_nan_and_infinite_metrics_are_stored_and_read_back_by_the_stock_client(
    det: Callable[..., str], sdk: Callable[[str], Any], api: AuthedStub, tmp_path: Path
) -> None:
    context = tmp_path / "nonfinite"
    context.mkdir()
    (context / "train.py").write_text(NON_FINITE_TRIAL)
    config = tmp_path / "nonfinite.yaml"
    config.write_text(
        "name: nonfinite\nentrypoint: python3 train.py\nmax_restarts: 0\n"
        "searcher: {name: single, metric: x, max_length: {batches: 2}}\n"
    )
    det("experiment", "create", str(config), str(context))
    wait_state(api, 1, "COMPLETED", timeout=300)
    (trial,) = trials(api, 1)

    # The SDK reads them back as Determined answers them: "NaN", "Infinity", "-Infinity".
    validations = sdk(
        f"result = [[m.steps_completed, m.metrics] "
        f"for m in client.get_trial({trial.id}).iter_metrics('validation')]"
    )
    assert validations == [
        [1, {"x": "NaN", "top": "Infinity", "low": "-Infinity"}],
        [2, {"x": 0.5, "top": 1.0, "low": 0.0}],
    ]
    training = sdk(f"result = [m.metrics for m in client.get_trial({trial.id}).iter_metrics('training')]")
    assert training == [{"loss": "NaN", "grad": "Infinity"}]
    # Every reading path answers (no 500): the trial, its summary, the experiment and its listing.
    best = sdk(
        f"t = bindings.get_GetTrial(client._determined._session, trialId={trial.id}).trial\n"
        "result = [t.searcherMetricValue, t.summaryMetrics['avg_metrics']['loss']['last']]"
    )
    assert best == [0.5, "NaN"]
    assert sdk("result = [t.id for t in client.get_experiment(1).list_trials()]") == [trial.id]
    shown = json.loads(det("trial", "describe", str(trial.id), "--json"))
    assert shown["trial"]["summaryMetrics"]["validation_metrics"]["top"]["max"] == 1.0
    for args in (("trial", "describe", str(trial.id)), ("experiment", "describe", "1"),
                 ("experiment", "list-trials", "1"), ("experiment", "list")):  # fmt: skip
        det(*args)
