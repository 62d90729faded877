"""Issue 4's checks: ASHA in both modes on a real cluster, promotion resuming from checkpoints,
and a search that survives the searcher and the master being killed in the middle."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import grpc
import pytest
import yaml

from tests.e2e.helpers import config, create, logs, trial_state, trials, wait_state
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

TPE_SEARCHER = Path(__file__).parents[2] / "examples" / "custom_searcher" / "tpe" / "tpe_searcher.py"


def _finished(api, experiment_id: int) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for t in trials(api, experiment_id) if trial_state(t) in ("COMPLETED", "ERROR", "CANCELED"))


def _active(api, experiment_id: int) -> int:  # type: ignore[no-untyped-def]
    return sum(
        1 for t in trials(api, experiment_id) if trial_state(t) not in ("COMPLETED", "ERROR", "CANCELED")
    )


def test_killing_the_searcher_and_the_master_mid_search_loses_and_duplicates_nothing(
    cluster: TestCluster,
) -> None:
    api = cluster.login()
    text = config(
        hyperparameters={
            "steps": 4,
            "step_s": 0.15,
            "scale": {"type": "double", "minval": 0.5, "maxval": 2.0},
        },
        searcher={
            "name": "random",
            "metric": "validation_loss",
            "max_trials": 10,
            "max_concurrent_trials": 2,
            "max_length": {"batches": 4},
        },
        reproducibility={"experiment_seed": 7},
    )
    experiment_id = create(api, text)
    # Killed while two trials run (not in the gap between a trial's exit and its replacement's
    # creation), so two more trials can end while the searcher is away.
    wait_for(
        lambda: _finished(api, experiment_id) >= 2 and _active(api, experiment_id) == 2,
        timeout=120,
        what="two trials done and two running",
    )

    cluster.kill("searcher", signal.SIGKILL)
    # Trials keep running without the searcher; their exits queue up for it.
    wait_for(
        lambda: _finished(api, experiment_id) >= 4, timeout=120, what="trials done while the searcher is away"
    )
    cluster.restart("searcher")
    wait_for(lambda: _finished(api, experiment_id) >= 6, timeout=120, what="search moving again")

    cluster.kill("master", signal.SIGKILL)
    cluster.restart("master")
    api = cluster.login()

    wait_state(api, experiment_id, "COMPLETED", timeout=240)
    found = trials(api, experiment_id)
    assert len(found) == 10
    assert all(trial_state(t) == "COMPLETED" for t in found)
    assert len({t.request_id for t in found}) == 10
    # The same seed without any kill gives the same ten trials: none lost, none made twice.
    reference_id = create(api, text)
    wait_state(api, reference_id, "COMPLETED", timeout=240)
    reference = trials(api, reference_id)
    assert Counter(t.request_id for t in found) == Counter(t.request_id for t in reference)
    assert sorted(dict(t.hparams)["scale"] for t in found) == sorted(
        dict(t.hparams)["scale"] for t in reference
    )


def test_adaptive_asha_stops_the_worst_and_completes_with_every_trial(cluster: TestCluster) -> None:
    api = cluster.login()
    text = config(
        hyperparameters={
            "steps": 16,
            # Each bracket runs one trial at a time, and a trial the searcher stops must hear its
            # preemption before it trains its 16 steps out: 0.2 s a step leaves it 2.4 s past its
            # first rung (0.05 s left 0.6 s, which a loaded machine sometimes missed).
            "step_s": 0.2,
            "ckpt_every": 4,
            "scale": {"type": "double", "minval": 0.5, "maxval": 4.0},
            # Which trials are stopped must not hang on the draws: promotion ASHA stops a trial only
            # at the close of a bracket, when the bracket's last trial reaches a rung, and a last
            # trial that drew well went on to the top in both brackets now and then (CI, stop 59).
            # With each trial ranking below those created before it, every bracket's last trial is
            # its worst and is stopped at its first rung.
            "id_penalty": 10.0,
        },
        searcher={
            "name": "adaptive_asha",
            "metric": "validation_loss",
            "max_trials": 8,
            "time_metric": "batches",
            "max_time": 16,
            "divisor": 2,
            "max_rungs": 3,
            "max_concurrent_trials": 2,
        },
    )
    experiment_id = create(api, text)
    wait_state(api, experiment_id, "COMPLETED", timeout=300)
    found = trials(api, experiment_id)
    assert len(found) == 8 and all(trial_state(t) == "COMPLETED" for t in found)
    steps = sorted(t.total_batches_processed for t in found)
    assert steps[-1] == 16, "some trial trains to max_time"
    assert steps[0] < 16, "some trial is stopped early"
    stopped = [t for t in found if t.total_batches_processed < 16]
    for t in stopped:
        assert any(line.startswith("PREEMPTED") for line in logs(api, t.id)), t.id


def test_stopping_asha_trials_that_follow_operations_train_no_step_past_a_rung(cluster: TestCluster) -> None:
    """Stopping ASHA gives each trial its next rung as the operation's length; a trial that follows
    its operations hears the verdict at each rung before it trains on, so a stopped trial ends exactly
    at a rung, in its first allocation, and none is preempted mid-rung."""
    api = cluster.login()
    text = config(
        reproducibility={"experiment_seed": 5},
        hyperparameters={
            "follow_ops": True,
            "step_s": 0.05,
            "ckpt_every": 100,
            "scale": {"type": "double", "minval": 0.5, "maxval": 4.0},
        },
        searcher={
            "name": "async_halving",
            "metric": "validation_loss",
            "max_trials": 6,
            "num_rungs": 3,
            "divisor": 2,
            "time_metric": "batches",
            "max_time": 8,
            "stop_once": True,
            "max_concurrent_trials": 2,
        },
    )
    experiment_id = create(api, text)
    wait_state(api, experiment_id, "COMPLETED", timeout=300)
    found = trials(api, experiment_id)
    assert len(found) == 6 and all(trial_state(t) == "COMPLETED" for t in found)
    reached = sorted(t.total_batches_processed for t in found)
    assert set(reached) <= {2, 4, 8}, f"a trial trained past a rung (rungs 2, 4, 8): {reached}"
    assert reached[-1] == 8 and reached[0] < 8, reached
    for t in found:
        lines = logs(api, t.id)
        assert t.run_id == 1, f"trial {t.id} was restarted: the verdict should reach it while it waits"
        assert not any(line.startswith("PREEMPTED") for line in lines), t.id
        assert f"OP-DONE {t.total_batches_processed}" in lines, t.id


def _promotion_config(max_time: int, concurrent: int = 2, **hyperparameters: object) -> str:
    """Promotion ASHA over 4 trials in 2 rungs (max_time / 2, max_time), trials following their ops;
    the same 4 hyperparameter draws every time."""
    return config(
        reproducibility={"experiment_seed": 3},
        hyperparameters={
            "follow_ops": True,
            "ckpt_every": 100,
            "scale": {"type": "double", "minval": 0.5, "maxval": 4.0},
            **hyperparameters,
        },
        searcher={
            "name": "async_halving",
            "metric": "validation_loss",
            "max_trials": 4,
            "num_rungs": 2,
            "divisor": 2,
            "time_metric": "batches",
            "max_time": max_time,
            "stop_once": False,
            "max_concurrent_trials": concurrent,
        },
    )


def test_promotion_resumes_from_the_checkpoint_of_the_first_allocation(cluster: TestCluster) -> None:
    api = cluster.login()
    # One trial at a time: each trial has exited before the next one's result can promote it, so
    # whether a promotion resumes an exited trial depends only on the (seeded) draws.
    text = _promotion_config(max_time=8, concurrent=1, step_s=0.05)
    experiment_id = create(api, text)
    wait_state(api, experiment_id, "COMPLETED", timeout=300)
    found = trials(api, experiment_id)
    assert len(found) == 4 and all(trial_state(t) == "COMPLETED" for t in found)
    promoted = [t for t in found if t.total_batches_processed == 8]
    assert promoted, "the best trials of rung 0 are promoted to rung 1"
    assert all(t.total_batches_processed in (4, 8) for t in found)
    for t in promoted:
        lines = logs(api, t.id)
        if t.run_id >= 2:
            # Resumed in a later allocation: from the checkpoint its first one wrote at rung 0.
            assert "RESUMED 4" in lines, t.id
            first_checkpoint = next(line for line in lines if line.startswith("CHECKPOINT 4 "))
            assert first_checkpoint
        assert "OP-DONE 8" in lines
    assert any(t.run_id >= 2 for t in promoted), "at least one promotion resumed a stopped trial"


def test_promotion_ranks_trials_by_their_completed_operations_when_validations_lack_the_metric(
    cluster: TestCluster,
) -> None:
    """Trials that report no validation at all (val_every past the end) still get ranked and
    promoted: op.report_completed(value) gives the searcher its result."""
    api = cluster.login()
    text = _promotion_config(max_time=4, step_s=0.02, val_every=1000)
    experiment_id = create(api, text)
    wait_state(api, experiment_id, "COMPLETED", timeout=180)
    found = trials(api, experiment_id)
    assert len(found) == 4 and all(trial_state(t) == "COMPLETED" for t in found)
    reached = [t.total_batches_processed for t in found]
    # Ranked by their reported results: the best go on to 4 (how many depends on the order results
    # arrive in), the worst of all is never in a rung's top half.
    assert set(reached) == {2, 4}, reached


def test_a_custom_tpe_searcher_runs_a_search_by_plugin_name(db_url: str | None, tmp_path: Path) -> None:
    ready = tmp_path / "tpe.json"
    searcher = subprocess.Popen(
        [sys.executable, str(TPE_SEARCHER), "--port", "0", "--ready-file", str(ready)],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "tpe.log").open("w"),
    )
    try:
        port = wait_for(lambda: json.loads(ready.read_text())["grpc_port"], timeout=60, what="TPE searcher")
        env = {"CAIRN_SEARCHER_PLUGINS": f"tpe=127.0.0.1:{port}"}
        with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=2, extra_env=env) as cluster:
            api = cluster.login()
            text = config(
                hyperparameters={
                    "steps": 3,
                    "step_s": 0.05,
                    "scale": {"type": "double", "minval": 0.5, "maxval": 2.0},
                },
                searcher={
                    "name": "custom",
                    "plugin": "tpe",
                    "metric": "validation_loss",
                    "max_trials": 6,
                    "max_concurrent_trials": 2,
                },
            )
            experiment_id = create(api, text)
            wait_state(api, experiment_id, "COMPLETED", timeout=240)
            found = trials(api, experiment_id)
            assert len(found) == 6 and all(trial_state(t) == "COMPLETED" for t in found)
            assert len({t.request_id for t in found}) == 6

            unknown = yaml.safe_load(text)
            unknown["searcher"]["plugin"] = "nope"
            with pytest.raises(grpc.RpcError) as failure:
                create(api, yaml.safe_dump(unknown))
            assert "searcher.plugin: no searcher plug-in named 'nope' (registered: tpe)" in (
                failure.value.details() or ""
            )
    finally:
        searcher.terminate()
        searcher.wait(timeout=30)
