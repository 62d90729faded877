"""Generic tasks with the stock `det task` and SDK on a cluster of one agent and one slot, judged by
the state fields Determined's GetTask reports (`taskState`, `forkedFrom`, `noPause`, `config`,
`endTime`): created, paused, unpaused, killed, forked (with a config of its own, and as the stock
`det task fork` copies it), and completed."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.determined_client import det_runner, determined_env, sdk_runner
from tests.support.cluster import TestCluster, running_cluster
from tests.support.polling import wait_for


@pytest.fixture
def one_slot_cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent, one slot; a pause becomes a kill after 3 s (the task below ignores preemption)."""
    with running_cluster(
        tmp_path / "cluster", db_url, agents=1, slots=1, extra_env={"CAIRN_PREEMPTION_TIMEOUT": "3"}
    ) as c:
        yield c


def task_reader(sdk: Callable[[str], Any]) -> Callable[[str], dict[str, Any]]:
    """The task as the stock SDK's bindings read it (v1Task), back as its JSON."""

    def read(task_id: str) -> dict[str, Any]:
        task: dict[str, Any] = sdk(
            f"result = bindings.get_GetTask(client._determined._session, taskId={task_id!r}).task.to_json()"
        )
        return task

    return read


def created_id(output: str) -> str:
    return output.split("Created task ")[1].split(maxsplit=1)[0]


def test_generic_tasks_report_their_state_through_their_lifecycle(
    one_slot_cluster: TestCluster, tmp_path: Path
) -> None:
    env = determined_env(one_slot_cluster, tmp_path / "home")
    det, task = det_runner(env), task_reader(sdk_runner(env))
    context = tmp_path / "context"
    context.mkdir()
    (context / "work.sh").write_text("echo run $DET_ALLOCATION_ID\nsleep 600\n")
    config = tmp_path / "task.yaml"
    config.write_text("entrypoint: ['sh', 'work.sh']\n")

    def state(task_id: str) -> str:
        return str(task(task_id)["taskState"])

    def wait_state(task_id: str, wanted: str) -> dict[str, Any]:
        wait_for(lambda: state(task_id) == wanted, timeout=90, what=f"task {task_id} {wanted}")
        return task(task_id)

    def running(task_id: str, count: int) -> bool:
        allocations = task(task_id)["allocations"]
        return len(allocations) == count and allocations[0]["state"] == "STATE_RUNNING"

    source = created_id(det("task", "create", str(config), "--context", str(context)))
    shown = task(source)
    assert (shown["taskType"], shown["taskState"], shown["noPause"]) == (
        "TASK_TYPE_GENERIC",
        "GENERIC_TASK_STATE_ACTIVE",
        False,
    )
    assert json.loads(shown["config"])["entrypoint"] == ["sh", "work.sh"]
    assert shown["forkedFrom"] is None and shown["parentId"] is None and shown["endTime"] is None

    wait_for(lambda: running(source, 1), timeout=90, what="the first run")
    det("task", "pause", source)
    paused = wait_state(source, "GENERIC_TASK_STATE_PAUSED")
    assert paused["allocations"][0]["state"] == "STATE_TERMINATED" and paused["endTime"] is None
    det("task", "unpause", source)
    assert state(source) == "GENERIC_TASK_STATE_ACTIVE"
    wait_for(lambda: running(source, 2), timeout=90, what="the second run")
    det("task", "kill", source)
    killed = wait_state(source, "GENERIC_TASK_STATE_CANCELED")
    assert killed["endTime"] is not None

    # A fork with a config of its own runs in the source's context and completes.
    quick = tmp_path / "quick.yaml"
    quick.write_text("entrypoint: ['sh', '-c', 'test -f work.sh && echo forked']\n")
    fork = created_id(det("task", "create", str(quick), "--fork", source, "--no_pause"))
    forked = wait_state(fork, "GENERIC_TASK_STATE_COMPLETED")
    assert (forked["forkedFrom"], forked["noPause"], forked["endTime"] is not None) == (source, True, True)
    assert json.loads(forked["config"])["entrypoint"][0] == "sh"
    assert "forked" in det("task", "logs", fork)

    # The stock `det task fork` copies the source as it was.
    copy = created_id(det("task", "fork", source))
    copied = task(copy)
    assert (copied["forkedFrom"], copied["taskState"]) == (source, "GENERIC_TASK_STATE_ACTIVE")
    assert json.loads(copied["config"])["entrypoint"] == ["sh", "work.sh"]
    wait_for(lambda: running(copy, 1), timeout=90, what="the copy running")
    det("task", "kill", copy)
    wait_state(copy, "GENERIC_TASK_STATE_CANCELED")
