"""A generic task's fields as Determined's GetTask reports them (`GET /api/v1/tasks/{id}`, the
stock client's v1Task): its state through create, pause, unpause and its end, its config, its
no_pause, the task it was forked from; none of the generic-task fields on any other kind. Run on
each database, through the servicer and the gateway's JSON encoding."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import struct_pb2

from cairn.api.v1 import command_pb2 as cpb
from cairn.api.v1 import notebook_pb2 as npb
from services.common import interceptors
from services.master.gateway.json_encoding import JsonEncoder
from services.master.servicers.api.service import CairnServicer
from tests.unit.master.domain.harness import Master
from tests.unit.master.servicer_double import Context, api_deps


@pytest.fixture
def api(master: Master) -> CairnServicer:
    return CairnServicer(api_deps(master))


def call(master: Master, api: CairnServicer, name: str, request: Any) -> Any:
    token = interceptors._principal.set(master.admin)
    try:
        response = getattr(api, name)(request, Context())
    finally:
        interceptors._principal.reset(token)
    master.settle()
    return response


def task_json(master: Master, api: CairnServicer, task_id: str) -> dict[str, Any]:
    """The task as the REST gateway prints it."""
    response = call(master, api, "GetTask", npb.GetTaskRequest(task_id=task_id))
    task: dict[str, Any] = JsonEncoder().to_object(response)["task"]
    return task


def test_a_generic_tasks_state_follows_its_lifecycle(master: Master, api: CairnServicer) -> None:
    master.add_agent("a1")
    text = "entrypoint: ['sh', '-c', 'sleep 600']\n"
    created = call(master, api, "CreateGenericTask", cpb.CreateGenericTaskRequest(config=text))
    task_id = created.task_id
    task = task_json(master, api, task_id)
    assert (task["taskType"], task["taskState"], task["noPause"]) == (
        "TASK_TYPE_GENERIC",
        "GENERIC_TASK_STATE_ACTIVE",
        False,
    )
    assert json.loads(task["config"])["entrypoint"] == ["sh", "-c", "sleep 600"]
    assert "parentId" not in task and "forkedFrom" not in task and task["endTime"] is None

    (first,) = [a["allocationId"] for a in task["allocations"]]
    (container,) = master.run_containers(first)
    call(master, api, "PauseGenericTask", cpb.PauseGenericTaskRequest(task_id=task_id))
    assert task_json(master, api, task_id)["taskState"] == "GENERIC_TASK_STATE_STOPPING_PAUSED"
    master.exit(container, 0)  # it stopped as asked
    assert task_json(master, api, task_id)["taskState"] == "GENERIC_TASK_STATE_PAUSED"
    call(master, api, "UnpauseGenericTask", cpb.UnpauseGenericTaskRequest(task_id=task_id))
    task = task_json(master, api, task_id)
    assert task["taskState"] == "GENERIC_TASK_STATE_ACTIVE" and len(task["allocations"]) == 2
    (container,) = master.run_containers(task["allocations"][0]["allocationId"])
    master.exit(container, 0)
    task = task_json(master, api, task_id)
    assert task["taskState"] == "GENERIC_TASK_STATE_COMPLETED" and task["endTime"] is not None

    # A fork names its source and takes its config; a no_pause task says so.
    fork = call(
        master,
        api,
        "CreateGenericTask",
        cpb.CreateGenericTaskRequest(forked_from=task_id, no_pause=True, parent_id=task_id),
    ).task_id
    forked = task_json(master, api, fork)
    assert (forked["forkedFrom"], forked["parentId"], forked["noPause"]) == (task_id, task_id, True)
    assert json.loads(forked["config"]) == json.loads(task["config"])
    assert forked["taskState"] == "GENERIC_TASK_STATE_ACTIVE"


def test_a_killed_or_failed_generic_task_says_so(master: Master, api: CairnServicer) -> None:
    master.add_agent("a1", slots=2)
    text = "entrypoint: ['false']\n"
    failing = call(master, api, "CreateGenericTask", cpb.CreateGenericTaskRequest(config=text)).task_id
    killed = call(master, api, "CreateGenericTask", cpb.CreateGenericTaskRequest(config=text)).task_id
    (container,) = master.run_containers(task_json(master, api, failing)["allocations"][0]["allocationId"])
    master.exit(container, 1)
    assert task_json(master, api, failing)["taskState"] == "GENERIC_TASK_STATE_ERROR"
    master.run_containers(task_json(master, api, killed)["allocations"][0]["allocationId"])
    call(master, api, "KillGenericTask", cpb.KillGenericTaskRequest(task_id=killed))
    assert task_json(master, api, killed)["taskState"] in {
        "GENERIC_TASK_STATE_STOPPING_CANCELED",
        "GENERIC_TASK_STATE_CANCELED",
    }


def test_other_kinds_carry_no_generic_task_fields(master: Master, api: CairnServicer) -> None:
    config = {"entrypoint": "true", "resources": {"slots": 0}}
    struct = struct_pb2.Struct()
    struct.update(config)
    command = call(master, api, "LaunchCommand", cpb.LaunchCommandRequest(config=struct)).command
    task = task_json(master, api, command.id)
    assert task["taskType"] == "TASK_TYPE_COMMAND"
    for field in ("taskState", "noPause", "config", "parentId", "forkedFrom"):
        assert field not in task, field  # as Determined's gateway prints an unset optional field
