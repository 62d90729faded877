"""A local cluster looks after itself: the watchdog restarts any service killed -9 (same address,
token) while a search runs; `cairn cluster up` on a partly running cluster starts only what is
missing; `cairn cluster down` stops trials in order, without counting them as failures, and
leaves no process behind, also when an agent was killed -9 before it."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from cairn.agent_files import WorkDirPaths
from cairn.localcluster.processes import is_running
from cairn.localcluster.record import ClusterRecord, load_record
from cairn.localcluster.supervisor import cluster_status
from tests.e2e.helpers import (
    ACTIVE_STATES,
    config,
    create,
    ledger,
    logs,
    stored_metrics,
    trial_state,
    trials,
    wait_state,
)
from tests.support.cluster import AuthedStub, TestCluster
from tests.support.polling import wait_for

SERVICES = ("scheduler", "searcher", "checkpoint", "master", "agent-1")


def _record(cluster: TestCluster) -> ClusterRecord:
    record = load_record(cluster.state_dir / "cluster.json")
    assert record is not None
    return record


def _search(steps: int, pid_dir: Path | None = None, trials_wanted: int = 2) -> str:
    hparams: dict[str, object] = {
        "steps": steps,
        "step_s": 0.1,
        "ckpt_every": 5,
        "scale": {"type": "double", "minval": 0.5, "maxval": 2.0},
    }
    if pid_dir is not None:
        hparams["pid_dir"] = str(pid_dir)
    return config(
        hyperparameters=hparams,
        searcher={
            "name": "random",
            "metric": "validation_loss",
            "max_trials": trials_wanted,
            "max_concurrent_trials": trials_wanted,
            "max_length": {"batches": steps},
        },
    )


def _running_with_reports(api: AuthedStub, experiment_id: int, count: int) -> bool:
    found = trials(api, experiment_id)
    return len(found) == count and all(
        trial_state(t) == "RUNNING" and len(stored_metrics(api, t.id, "training")) >= 3 for t in found
    )


def _metrics_match_what_the_code_said(api: AuthedStub, experiment_id: int) -> None:
    """Every step the code reported is stored exactly once, from the last run that reported it (a
    run resumed from an earlier checkpoint reports some steps again and supersedes the older run)."""
    for trial in trials(api, experiment_id):
        said = ledger(logs(api, trial.id))
        for group in ("training", "validation"):
            stored = [(m.total_batches, m.trial_run_id) for m in stored_metrics(api, trial.id, group)]
            assert len({step for step, _ in stored}) == len(stored), (trial.id, group, "duplicates")
            last_run: dict[int, int] = {}
            for step, run in said[group]:
                last_run[step] = max(run, last_run.get(step, 0))
            assert sorted(stored) == sorted(last_run.items()), (trial.id, group)


def _container_pids(cluster: TestCluster) -> list[int]:
    """The shims and trial commands the agents recorded, from the files the agents write."""
    pids = []
    for agent in _record(cluster).by_role("agent"):
        assert agent.work_dir
        for container in WorkDirPaths(Path(agent.work_dir)).all_containers():
            for info in (container.shim_info, container.child_info):
                if info.exists():
                    pids.append(int(json.loads(info.read_text())["pid"]))
    return pids


def _trial_pids(pid_dir: Path) -> list[int]:
    return [int(path.read_text()) for path in sorted(pid_dir.glob("*.pid"))]


def test_each_service_killed_9_is_restarted_and_the_search_completes(
    db_url: str | None, tmp_path: Path
) -> None:
    cluster = TestCluster(tmp_path / "cluster", db_url, agents=1, slots=2, supervise=True).start()
    try:
        api = cluster.login()
        experiment_id = create(api, _search(steps=120))
        wait_for(
            lambda: _running_with_reports(api, experiment_id, 2), timeout=90, what="two trials reporting"
        )

        for name in SERVICES:
            before = cluster.process(name)
            os.kill(before.pid, signal.SIGKILL)
            wait_for(lambda pid=before.pid: not is_running(pid), timeout=20, what=f"{name} to die")

            def repaired(name: str = name, old_pid: int = before.pid) -> bool:
                status = cluster_status(cluster.state_dir)
                return status is not None and status.healthy and cluster.process(name).pid != old_pid

            wait_for(repaired, timeout=90, what=f"the watchdog to restart {name}")
            after = cluster.process(name)
            # Same address, so the others find it again without being told.
            assert (after.grpc_port, after.http_port) == (before.grpc_port, before.http_port)
            assert after.restarts == 1 and after.last_exit and not after.gave_up
        api = cluster.login()

        wait_state(api, experiment_id, "COMPLETED", timeout=240)
        found = trials(api, experiment_id)
        assert len(found) == 2
        assert all(trial_state(t) == "COMPLETED" and t.restarts == 0 for t in found)
        _metrics_match_what_the_code_said(api, experiment_id)
        for trial in found:
            steps = [m.total_batches for m in stored_metrics(api, trial.id, "training")]
            assert sorted(set(steps)) == list(range(1, 121)), trial.id
    finally:
        cluster.stop()


def test_cluster_down_during_a_search_stops_every_process_and_fails_no_trial(
    db_url: str | None, tmp_path: Path, pid_dir: Path
) -> None:
    # Two agents: a trial stopped on one must not be restarted onto the other while it stops too.
    cluster = TestCluster(tmp_path / "cluster", db_url, agents=2, slots=1, supervise=True).start()
    stopped = False
    try:
        api = cluster.login()
        experiment_id = create(api, _search(steps=60, pid_dir=pid_dir))
        wait_for(
            lambda: _running_with_reports(api, experiment_id, 2), timeout=90, what="two trials reporting"
        )
        service_pids = [p.pid for p in _record(cluster).processes]
        container_pids = _container_pids(cluster)
        assert len(_trial_pids(pid_dir)) == 2 and len(container_pids) >= 4

        cluster.stop()  # also asserts no recorded process and nothing naming the state dir is left
        stopped = True
        for pid in service_pids + container_pids + _trial_pids(pid_dir):
            assert not is_running(pid), pid

        # The stored end state, read from a fresh start on the same database: the shutdown stopped
        # the trials as the infrastructure's doing, so none spent a restart, and the search goes on.
        cluster.start()
        stopped = False
        api = cluster.login()
        for trial in trials(api, experiment_id):
            assert trial.restarts == 0 and trial_state(trial) in {*ACTIVE_STATES, "COMPLETED"}, trial
        wait_state(api, experiment_id, "COMPLETED", timeout=240)
        assert all(t.restarts == 0 for t in trials(api, experiment_id))
        _metrics_match_what_the_code_said(api, experiment_id)
    finally:
        if not stopped:
            cluster.stop()


def test_cluster_down_after_an_agent_was_killed_leaves_no_trial_process(
    db_url: str | None, tmp_path: Path, pid_dir: Path
) -> None:
    # No watchdog: the agent must stay dead, as when nobody supervises it.
    cluster = TestCluster(tmp_path / "cluster", db_url, agents=1, slots=1).start()
    stopped = False
    try:
        api = cluster.login()
        create(api, _search(steps=600, pid_dir=pid_dir, trials_wanted=1))
        wait_for(lambda: len(_trial_pids(pid_dir)) == 1, timeout=90, what="the trial to run")
        container_pids = _container_pids(cluster)
        assert len(container_pids) == 2  # its shim and its command

        cluster.kill("agent-1", signal.SIGKILL)
        assert all(is_running(pid) for pid in container_pids + _trial_pids(pid_dir))

        cluster.stop()
        stopped = True
        for pid in container_pids + _trial_pids(pid_dir):
            assert not is_running(pid), pid
    finally:
        if not stopped:
            cluster.stop()


def test_cluster_up_with_one_service_dead_starts_only_that_one(db_url: str | None, tmp_path: Path) -> None:
    cluster = TestCluster(tmp_path / "cluster", db_url, agents=1, slots=1).start()
    try:
        before = {p.name: p for p in _record(cluster).processes}
        cluster.kill("searcher", signal.SIGKILL)

        cluster.start()  # `cairn cluster up` again, on the same state dir

        after = {p.name: p for p in _record(cluster).processes}
        assert set(after) == set(before)
        changed = {name for name in after if after[name].pid != before[name].pid}
        assert changed == {"searcher"}
        assert after["searcher"].grpc_port == before["searcher"].grpc_port
        status = cluster_status(cluster.state_dir)
        assert status is not None and status.healthy
        # And the master uses it again: a search runs to its end.
        api = cluster.login()
        experiment_id = create(api, _search(steps=3, trials_wanted=1))
        wait_state(api, experiment_id, "COMPLETED", timeout=120)
    finally:
        cluster.stop()
