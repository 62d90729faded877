"""The stock Determined client against a Cairn cluster: PyPI's determined==0.38.1 (`make install`
puts it in .venv-task, the task environment a local cluster's trials run in). Its `det` CLI drives
the cluster over REST; scripts written against Determined's Core API (`python3 script.py` with
`import determined`, as a user of a default cluster writes them), its own torch launcher, and a
PyTorchTrial with a legacy `model_def:Trial` entrypoint run as Cairn trials."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.determined_client import det_runner, determined_env
from tests.e2e.helpers import stored_metrics, trial_state, trials, wait_state
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
DET_TRIAL_DIR = FIXTURES / "det_trial"


def det_config(tmp_path: Path, steps: int, step_s: float = 0.1) -> Path:
    path = tmp_path / "det.yaml"
    path.write_text(
        f"""
name: determined-core-api
entrypoint: python3 det_core_trial.py
hyperparameters:
  steps: {steps}
  step_s: {step_s}
  increment_by: 2
searcher:
  name: single
  metric: x
  smaller_is_better: false
  max_length:
    batches: {steps}
max_restarts: 0
"""
    )
    return path


# The stock client's core flows on the local cluster's SQLite default as on PostgreSQL.
@pytest.mark.on_each_database
def test_det_cli_and_a_determined_core_api_trial(cluster: TestCluster, det, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    info = det("master", "info", "--json")
    assert json.loads(info)["clusterId"]
    agents = det("agent", "list", "--json")
    assert [a["id"] for a in json.loads(agents)] == ["agent-1"]
    slots = det("slot", "list")
    assert "agent-1" in slots and "FREE" in slots

    created = det("experiment", "create", str(det_config(tmp_path, steps=9)), str(DET_TRIAL_DIR), "-f")
    assert "Created experiment 1" in created and "DET-DONE" in created
    api = cluster.login()
    wait_state(api, 1, "COMPLETED")
    listed = det("experiment", "list")
    assert "determined-core-api" in listed and "COMPLETED" in listed
    described = det("experiment", "describe", "1")
    assert "Workloads" in described and "COMPLETED" in described

    # What the Determined script reported is in Cairn, as Cairn stores it.
    (trial,) = trials(api, 1)
    training = [
        (m.total_batches, m.metrics["avg_metrics"]["x"]) for m in stored_metrics(api, trial.id, "training")
    ]
    assert training == [(step, 2.0 * step) for step in range(1, 10)]
    validation = [m.total_batches for m in stored_metrics(api, trial.id, "validation")]
    assert validation == [2, 4, 6, 8]
    assert trial.searcher_metric_value == 16.0
    # Checkpoints at steps 3, 6 and 9; the GC policy (best 1, latest 1) keeps 6 (x=12, validated)
    # and 9 (the latest) once the experiment ends; 3 is listed DELETED, as Determined lists it.
    at_3, at_6, at_9 = logs_of_checkpoints(det, trial.id)

    def states_listed() -> dict[str, str]:
        """Each checkpoint's row of `det e lc`: DELETED, COMPLETED, or missing."""
        lines = det("experiment", "list-checkpoints", "1").splitlines()
        found = {uuid: [line for line in lines if uuid in line] for uuid in (at_3, at_6, at_9)}
        return {
            uuid: "missing" if not rows else "DELETED" if "DELETED" in rows[0] else "COMPLETED"
            for uuid, rows in found.items()
        }

    wanted = {at_3: "DELETED", at_6: "COMPLETED", at_9: "COMPLETED"}
    wait_for(lambda: states_listed() == wanted, timeout=60, what="GC")
    logs = det("trial", "logs", str(trial.id))
    assert "DET-INFO trial=1" in logs and "DET-DONE" in logs


def logs_of_checkpoints(det, trial_id: int) -> list[str]:  # type: ignore[no-untyped-def]
    """The uuids the Determined script printed for its checkpoints."""
    return [
        line.split()[-1]
        for line in det("trial", "logs", str(trial_id)).splitlines()
        if "DET-CHECKPOINT" in line
    ]


# The stock client's core flows on the local cluster's SQLite default as on PostgreSQL.
@pytest.mark.on_each_database
def test_det_pause_activate_kill_and_follow_logs(cluster: TestCluster, det, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    det("experiment", "create", str(det_config(tmp_path, steps=300, step_s=0.1)), str(DET_TRIAL_DIR))
    api = cluster.login()
    trial_id = wait_for(lambda: trials(api, 1), timeout=60, what="trial")[0].id
    wait_for(lambda: len(stored_metrics(api, trial_id, "training")) >= 8, timeout=90, what="reports")

    det("experiment", "pause", "1")
    wait_state(api, 1, "PAUSED")
    wait_for(lambda: trials(api, 1)[0].runner_state == "TERMINATED", timeout=90, what="graceful stop")
    det("experiment", "activate", "1")
    wait_for(
        lambda: trials(api, 1)[0].run_id == 2 and trials(api, 1)[0].runner_state == "RUNNING",
        timeout=90,
        what="resumed",
    )
    wait_for(lambda: "DET-RESUMED" in det("trial", "logs", str(trial_id)), timeout=60, what="resume line")
    lines = det("trial", "logs", str(trial_id))
    preempted = int(
        next(
            line.split("DET-PREEMPTED ")[1].split()[0]
            for line in lines.splitlines()
            if "DET-PREEMPTED" in line
        )
    )
    resumed = int(
        next(line.split("DET-RESUMED ")[1].split()[0] for line in lines.splitlines() if "DET-RESUMED" in line)
    )
    assert 0 < resumed <= preempted and resumed % 3 == 0

    det("experiment", "kill", "1")
    wait_state(api, 1, "CANCELED", timeout=90)
    # Following the logs of an ended trial prints them and returns.
    followed = det("trial", "logs", "-f", str(trial_id))
    assert "DET-RESUMED" in followed
    assert trial_state(trials(api, 1)[0]) == "CANCELED"


@pytest.fixture
def one_signal_waiter(db_url: str | None, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Two slots, and a master that lets one call at a time wait for allocation signals."""
    with running_cluster(
        tmp_path / "cluster1w", db_url, agents=1, slots=2, extra_env={"CAIRN_MAX_SIGNAL_WAITERS": "1"}
    ) as c:
        yield c


def test_a_determined_trial_past_the_signal_waiters_bound_still_hears_its_preemption(
    one_signal_waiter: TestCluster, tmp_path: Path
) -> None:
    """Determined's preemption watcher long-polls its allocation's signal. With more running
    trials than the master's --max-signal-waiters, the poll that would have to wait is answered
    429; the stock client logs it and asks again 10 s later. A pause still reaches every trial,
    which checkpoints and stops as asked (none is killed at the preemption timeout)."""
    cluster = one_signal_waiter
    det = det_runner(determined_env(cluster, tmp_path / "home"))
    config = det_config(tmp_path, steps=600, step_s=0.1)
    text = config.read_text().replace(
        "  increment_by: 2\n", "  increment_by:\n    type: categorical\n    vals: [1, 2]\n"
    )
    config.write_text(text.replace("name: single", "name: grid\n  max_concurrent_trials: 2"))
    det("experiment", "create", str(config), str(DET_TRIAL_DIR))
    api = cluster.login()

    def both_reporting() -> list | None:
        found = [t for t in trials(api, 1) if len(stored_metrics(api, t.id, "training")) >= 3]
        return found if len(found) == 2 else None

    running = wait_for(both_reporting, timeout=90, what="two trials reporting")
    # One poll waits in the only slot; the other was refused and retries.
    wait_for(
        lambda: any("preemption API (retrying in 10s)" in det("trial", "logs", str(t.id)) for t in running),
        timeout=60,
        what="a refused long poll in a trial's log",
    )
    det("experiment", "pause", "1")
    wait_state(api, 1, "PAUSED", timeout=90)
    wait_for(
        lambda: all(t.runner_state == "TERMINATED" for t in trials(api, 1)), timeout=90, what="both stopped"
    )
    for t in running:
        assert "DET-PREEMPTED" in det("trial", "logs", str(t.id)), t.id
    det("experiment", "kill", "1")
    wait_state(api, 1, "CANCELED", timeout=90)


@pytest.fixture
def two_slots(db_url: str | None, tmp_path: Path):  # type: ignore[no-untyped-def]
    """One agent with two slots: one container whose launcher starts two workers."""
    with running_cluster(tmp_path / "cluster2", db_url, agents=1, slots=2) as c:
        yield c


def test_determined_launcher_and_a_pytorch_trial(two_slots: TestCluster, tmp_path: Path) -> None:
    cluster = two_slots
    det = det_runner(determined_env(cluster, tmp_path / "home"))
    api = cluster.login()
    # Determined's own launcher: two workers in the one container, torch.distributed over gloo,
    # Determined's DistributedContext, every line tagged with its rank by Determined's wrap_rank.
    launcher = tmp_path / "dist.yaml"
    launcher.write_text(
        """
name: determined-launcher
entrypoint: python3 -m determined.launch.torch_distributed python3 det_dist.py
searcher: {name: single, metric: sum, max_length: {batches: 3}}
resources: {slots_per_trial: 2}
max_restarts: 0
"""
    )
    det("experiment", "create", str(launcher), str(FIXTURES / "det_dist"), "-f")
    wait_state(api, 1, "COMPLETED", timeout=180)
    (trial,) = trials(api, 1)
    for rank in (0, 1):
        only = det("trial", "logs", str(trial.id), "--rank-id", str(rank))
        assert f"DET-DIST rank={rank} size=2 allreduce=3.0 allgather=[0, 2]" in only
        assert f"DET-DIST rank={1 - rank}" not in only
    assert [m.total_batches for m in stored_metrics(api, trial.id, "training")] == [1, 2, 3]

    # A PyTorchTrial through Determined's harness, from a legacy trial-class entrypoint.
    legacy = tmp_path / "trial.yaml"
    legacy.write_text(
        """
name: pytorch-trial
entrypoint: model_def:MyTrial
hyperparameters: {lr: 0.5, global_batch_size: 16}
searcher: {name: single, metric: validation_loss, max_length: {batches: 40}}
min_validation_period: {batches: 20}
max_restarts: 0
"""
    )
    det("experiment", "create", str(legacy), str(FIXTURES / "det_pytorch_trial"), "-f")
    wait_state(api, 2, "COMPLETED", timeout=180)
    (trial,) = trials(api, 2)
    validation = [
        (m.total_batches, m.metrics["avg_metrics"]["accuracy"])
        for m in stored_metrics(api, trial.id, "validation")
    ]
    assert [steps for steps, _ in validation] == [20, 40] and validation[-1][1] > 0.8
    assert trial.checkpoint_count >= 1 and trial.runner_status
