"""Checkpoint GC and deletion as Determined has them, driven with the stock client
(determined==0.38.1) on a cluster of one agent and one slot, after Determined's own e2e tests
(test_checkpoints.py: test_gc_checkpoints_lfs, its fixtures gc_checkpoints_decreasing.yaml and
gc_checkpoints_increasing.yaml; the core_api checkpoint fixture's 10-second wait after
`Checkpoint.delete()`).

A trial validates and checkpoints every 100 batches up to 1000, its searcher metric
(validation_error, smaller is better) falling or rising; with save_experiment_best 3 and
save_trial_latest 2 (save_trial_best left at 1) Determined keeps {800, 900, 1000} and
{100, 200, 300, 900, 1000}, and marks the others DELETED, their files gone. The master's legacy
GET /tasks, which Determined's suite polls while waiting for GC, answers. A checkpoint deleted
through the SDK is DELETED, files and all, within the SDK's wait."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

SESSION = "client._determined._session"

# NoOpTrial's shape: validate, then checkpoint, every 100 batches; the metric falls or rises.
TRIAL = """
import pathlib, sys
import determined as det

progression = det.get_cluster_info().trial.hparams["metrics_progression"]
with det.core.init() as core:
    for batches in range(100, 1001, 100):
        error = 1.0 / batches if progression == "decreasing" else float(batches)
        core.train.report_validation_metrics(steps_completed=batches, metrics={"validation_error": error})
        with core.checkpoint.store_path({"steps_completed": batches}) as (path, _):
            (pathlib.Path(path) / "state").write_text(str(batches))
"""

EXPECTED = {
    "decreasing": ({800, 900, 1000}, {100, 200, 300, 400, 500, 600, 700}),
    "increasing": ({100, 200, 300, 900, 1000}, {400, 500, 600, 700, 800}),
}


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with one slot, as Determined's own suite runs."""
    with running_cluster(tmp_path / "cluster", db_url, agents=1, slots=1) as c:
        yield c


def _experiment(det, tmp_path: Path, progression: str) -> int:  # type: ignore[no-untyped-def]
    context = tmp_path / f"context-{progression}"
    context.mkdir()
    (context / "noop.py").write_text(TRIAL)
    config = tmp_path / f"gc-{progression}.yaml"
    config.write_text(
        f"name: noop_gc_checkpoints_{progression}\n"
        "entrypoint: python3 noop.py\nmax_restarts: 0\n"
        "checkpoint_storage: {save_experiment_best: 3, save_trial_latest: 2}\n"
        f"hyperparameters: {{metrics_progression: {progression}}}\n"
        "searcher: {name: single, metric: validation_error, smaller_is_better: true, "
        "max_length: {batches: 1000}}\n"
    )
    return int(det("experiment", "create", str(config), str(context)).split()[-1])


def test_gc_keeps_what_determined_keeps_and_an_sdk_deletion_completes_within_its_wait(
    cluster: TestCluster, tmp_path: Path
) -> None:
    env = determined_env(cluster, tmp_path / "home")
    det, sdk = det_runner(env), sdk_runner(env)
    for progression, (kept, deleted) in EXPECTED.items():
        experiment_id = _experiment(det, tmp_path, progression)

        def by_state(
            experiment_id: int = experiment_id, deleted: set[int] = deleted
        ) -> dict[str, list[int]] | None:
            found = sdk(
                f"""
s = {SESSION}
exp = client.get_experiment({experiment_id})
state = exp.wait(interval=1)
(trial,) = exp.list_trials()
tasks = s.get("tasks").json()  # Determined's suite polls this while GC runs
found = {{}}
for c in bindings.get_GetTrialCheckpoints(s, id=trial.id).checkpoints:
    found.setdefault(c.state.value, []).append(int(c.metadata["steps_completed"]))
result = [state.value, isinstance(tasks, dict), found]
"""
            )
            assert found[0] == "STATE_COMPLETED" and found[1] is True
            seen.append(found[2])  # noqa: B023 (read right after the wait)
            return found[2] if set(found[2].get("STATE_DELETED", [])) == deleted else None

        seen: list[dict[str, list[int]]] = []
        try:
            states = wait_for(by_state, timeout=120, interval=1, what=f"GC of the {progression} experiment")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last seen by state: {seen[-1:]}") from exc
        assert (set(states["STATE_COMPLETED"]), set(states["STATE_DELETED"])) == (kept, deleted)

    # The files follow the rows; a kept checkpoint deleted through the SDK is DELETED (files and
    # all) within the 10 seconds Determined's core_api fixture waits after Checkpoint.delete().
    outcome = sdk(
        f"""
import os, time
s = {SESSION}
exp = client.get_experiment({experiment_id})
storage = exp.config["checkpoint_storage"]
base = os.path.join(storage["host_path"], storage.get("storage_path") or "")
(trial,) = exp.list_trials()
checkpoints = bindings.get_GetTrialCheckpoints(s, id=trial.id).checkpoints
files = {{c.uuid: os.path.exists(os.path.join(base, c.uuid)) for c in checkpoints}}
alive = [c for c in checkpoints if c.state.value == "STATE_COMPLETED"]
victim = alive[0].uuid
client.get_checkpoint(victim).delete()
time.sleep(10)
after = client.get_checkpoint(victim)
result = [
    sorted(files[c.uuid] for c in checkpoints if c.state.value == "STATE_DELETED"),
    sorted(files[c.uuid] for c in alive),
    after.state.name,
    os.path.exists(os.path.join(base, victim)),
]
"""
    )
    assert outcome[0] == [False] * 5 and outcome[1] == [True] * 5, json.dumps(outcome)
    assert outcome[2:] == ["DELETED", False]
