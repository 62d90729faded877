"""Commands and generic tasks with the stock determined==0.38.1 client: `det cmd run|list|logs|kill`,
`det task create|config|pause|unpause|kill|list|logs`, zero-slot commands beside busy slots, and a
command that outlives a master kill -9. Every check reads the end state back (Cairn's API, a second
command): `det` exits 0 after many failures, so its exit code alone proves nothing."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn.api.v1 import command_pb2, task_pb2
from tests.e2e.determined_client import det_runner, determined_env
from tests.e2e.helpers import cairn_cli
from tests.support.cluster import AuthedStub, TestCluster, running_cluster
from tests.support.polling import wait_for

DET_TRIAL_DIR = Path(__file__).parent / "fixtures" / "det_trial"
TERMINATED = task_pb2.Allocation.STATE_TERMINATED
RUNNING = task_pb2.Allocation.STATE_RUNNING


def command(api: AuthedStub, command_id: str) -> command_pb2.Command:
    return api.GetCommand(command_pb2.GetCommandRequest(command_id=command_id)).command


def task_lines(api: AuthedStub, task_id: str) -> list[str]:
    """What the task's own process printed (the agent's notes about it left out)."""
    return [
        entry.log.rstrip("\n")
        for entry in api.TaskLogs(task_pb2.TaskLogsRequest(task_id=task_id))
        if entry.source != "agent"
    ]


def wait_command(api: AuthedStub, command_id: str, state: int, timeout: float = 90) -> command_pb2.Command:
    wait_for(lambda: command(api, command_id).state == state, timeout=timeout, what=f"command {command_id}")
    return command(api, command_id)


@pytest.fixture
def quick_preemption_cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent, two slots; a pause turns into a kill after 3 s (the generic task below does not
    watch for preemption)."""
    with running_cluster(
        tmp_path / "cluster", db_url, agents=1, slots=2, extra_env={"CAIRN_PREEMPTION_TIMEOUT": "3"}
    ) as c:
        yield c


def test_det_cmd_run_prints_its_output_and_records_its_exit_code(
    cluster: TestCluster, det: Callable[..., str], tmp_path: Path
) -> None:
    api = cluster.login()
    context = tmp_path / "context"
    context.mkdir()
    (context / "data.txt").write_text("from the context\n")
    out = det("cmd", "run", "--context", str(context), "cat data.txt; echo hi $DET_TASK_TYPE; exit 3")
    assert "from the context" in out and "hi COMMAND" in out  # followed until it ended
    command_id = det("cmd", "list", "--json")
    (listed,) = json.loads(command_id)
    ended = wait_command(api, listed["id"], TERMINATED)
    assert (ended.exit_code, ended.exit_status) == (3, "exited with code 3")
    assert listed["state"] == "TERMINATED" and listed["username"] == "determined"
    assert task_lines(api, ended.id)[-2:] == ["from the context", "hi COMMAND"]
    assert "hi COMMAND" in det("task", "logs", ended.id)
    assert ended.id in det("cmd", "list")

    # The same with Cairn's own CLI: run and follow, list, logs, a zero-slot run, describe,
    # set-priority, kill.
    cairn = cairn_cli(cluster, tmp_path / "cairn-home")
    followed = cairn("cmd", "run", "--context", str(context), "cat data.txt; exit 0")
    assert "from the context" in followed
    ids = [c["id"] for c in json.loads(cairn("cmd", "list", "--json"))["commands"]]
    assert len(ids) == 2 and ids[0] == ended.id
    assert "from the context" in cairn("cmd", "logs", ids[1])
    assert command(api, ids[1]).exit_code == 0
    long_running = cairn("cmd", "run", "-d", "--slots", "0", "sleep 600").strip()
    wait_command(api, long_running, RUNNING)
    # The family every interactive kind shares (cairn/cli/task_kinds.py): describe, set-priority.
    assert "Command (sleep 600)" in cairn("cmd", "describe", long_running)
    cairn("cmd", "set-priority", long_running, "30")
    config = api.GetCommand(command_pb2.GetCommandRequest(command_id=long_running)).config
    assert config["resources"]["priority"] == 30
    cairn("cmd", "kill", long_running)
    assert wait_command(api, long_running, TERMINATED).exit_status != ""


def test_det_cmd_kill_stops_a_long_command_and_task_list_shows_every_kind(
    cluster: TestCluster, det: Callable[..., str], tmp_path: Path
) -> None:
    api = cluster.login()
    command_id = det("cmd", "run", "-d", "echo started; sleep 600").strip()
    wait_command(api, command_id, RUNNING)
    experiment_config = tmp_path / "experiment.yaml"
    experiment_config.write_text(
        "entrypoint: python3 det_core_trial.py\n"
        "hyperparameters: {steps: 300, step_s: 0.2, increment_by: 1}\n"
        "searcher: {name: single, metric: x, smaller_is_better: false, max_length: {batches: 300}}\n"
    )
    det("experiment", "create", str(experiment_config), str(DET_TRIAL_DIR))

    def both_listed() -> bool:
        listed = det("task", "list")
        return command_id in listed and "Trial" in listed

    wait_for(both_listed, timeout=60, what="the command and the trial in det task list")
    assert "Killed command" in det("cmd", "kill", command_id)
    ended = wait_command(api, command_id, TERMINATED, timeout=60)
    assert ended.exit_status == "killed"
    assert "started" in task_lines(api, command_id)


def test_a_zero_slot_command_runs_while_every_slot_is_busy(
    cluster: TestCluster, det: Callable[..., str]
) -> None:
    api = cluster.login()
    busy = [det("cmd", "run", "-d", "sleep 600").strip() for _ in range(2)]
    for command_id in busy:
        wait_command(api, command_id, RUNNING)
    queued = det("cmd", "run", "-d", "echo never").strip()
    zero = det("cmd", "run", "-d", "--config", "resources.slots=0", "echo aux $DET_TASK_ID").strip()
    ended = wait_command(api, zero, TERMINATED)
    assert ended.exit_code == 0 and f"aux {zero}" in task_lines(api, zero)
    assert command(api, queued).state == task_pb2.Allocation.STATE_QUEUED  # it does need a slot
    # Determined's set-priority moves it in the queue: its config keeps the new priority.
    assert "Set priority" in det("cmd", "set", "priority", queued, "20")
    config = api.GetCommand(command_pb2.GetCommandRequest(command_id=queued)).config
    assert config["resources"]["priority"] == 20
    assert "Skipping" in det("cmd", "set", "priority", queued, "100")  # out of range: refused
    assert (
        api.GetCommand(command_pb2.GetCommandRequest(command_id=queued)).config["resources"]["priority"] == 20
    )
    for command_id in [*busy, queued]:
        det("cmd", "kill", command_id)


def test_a_generic_task_runs_pauses_and_unpauses(
    quick_preemption_cluster: TestCluster, tmp_path: Path
) -> None:
    cluster = quick_preemption_cluster
    det = det_runner(determined_env(cluster, tmp_path / "home"))
    config = tmp_path / "task.yaml"
    config.write_text("entrypoint: ['sh', '-c', 'echo run $DET_ALLOCATION_ID; sleep 600']\n")
    context = tmp_path / "context"
    context.mkdir()
    created = det("task", "create", str(config), "--context", str(context))
    task_id = created.split("Created task ")[1].split()[0]
    assert json.loads(det("task", "config", task_id, "--json"))["entrypoint"][0] == "sh"

    api = cluster.login()

    def live_allocations() -> list[str]:
        listed = api.GetTasks(task_pb2.GetTasksRequest()).allocation_id_to_summary
        return sorted(a for a, summary in listed.items() if summary.task_id == task_id)

    wait_for(lambda: f"run {task_id}.1" in task_lines(api, task_id), timeout=60, what="first run")
    det("task", "pause", task_id)
    # Paused: its allocation ends (killed once the 3 s preemption timeout passes), nothing reruns.
    wait_for(lambda: live_allocations() == [], timeout=60, what="task paused")
    det("task", "unpause", task_id)
    wait_for(lambda: f"run {task_id}.2" in task_lines(api, task_id), timeout=60, what="second run")
    assert live_allocations() == [f"{task_id}.2"]
    det("task", "kill", task_id)
    wait_for(lambda: live_allocations() == [], timeout=60, what="task killed")


def test_a_command_outlives_a_master_kill_9_with_its_logs_complete(
    cluster: TestCluster, det: Callable[..., str]
) -> None:
    api = cluster.login()
    script = "for i in $(seq 1 12); do echo line $i; sleep 0.5; done"
    command_id = det("cmd", "run", "-d", script).strip()
    wait_for(lambda: "line 2" in task_lines(api, command_id), timeout=60, what="command running")
    cluster.kill("master", signal.SIGKILL)
    cluster.restart("master")
    api = cluster.login()
    ended = wait_command(api, command_id, TERMINATED, timeout=90)
    assert ended.exit_code == 0
    assert task_lines(api, command_id) == [f"line {i}" for i in range(1, 13)]
    assert "line 12" in det("task", "logs", command_id)
