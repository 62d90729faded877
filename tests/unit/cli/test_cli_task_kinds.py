"""`cairn cmd|notebook|shell|tensorboard`: one family of commands, each kind's the same (list,
describe, kill, set-priority, logs; open for the kinds served over HTTP), calling the kind's own
Determined routes; each kind's own commands beside them. Against a stand-in for the master's stub
that answers from canned messages and records what it was asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from google.protobuf import struct_pb2

from cairn.api.v1 import command_pb2, master_pb2, notebook_pb2, shell_pb2, task_pb2, tensorboard_pb2
from cairn.cli.main import cli
from cairn.cli.state import CliState
from cairn.client.address import MasterAddress

RUNNING = task_pb2.Allocation.STATE_RUNNING
KINDS = {
    "cmd": (command_pb2, "Command", "command"),
    "notebook": (notebook_pb2, "Notebook", "notebook"),
    "shell": (shell_pb2, "Shell", "shell"),
    "tensorboard": (tensorboard_pb2, "Tensorboard", "TensorBoard"),
}


class Stub:
    """Answers each kind's routes with one task ("t1", owned by ann), GetTask with a ready
    allocation, GetMaster with the HTTP port; remembers the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def __getattr__(self, rpc: str) -> Any:
        def call(request: Any) -> Any:
            self.calls.append((rpc, request))
            return self._answer(rpc)

        return call

    def _answer(self, rpc: str) -> Any:
        if rpc == "GetMaster":
            return master_pb2.GetMasterResponse(http_port=8080)
        if rpc == "GetTask":
            ready = task_pb2.Allocation(is_ready=True)
            return notebook_pb2.GetTaskResponse(task=notebook_pb2.Task(task_id="t1", allocations=[ready]))
        if rpc == "TaskLogs":
            return iter([task_pb2.TaskLogsResponse(log="hello\n")])
        for module, name, _ in KINDS.values():
            if rpc.endswith(name) or rpc.endswith(f"{name}s") or rpc.endswith(f"{name}Priority"):
                message = getattr(module, name)(
                    id="t1", username="ann", description="work", state=RUNNING, resource_pool="default"
                )
                if hasattr(message, "service_address"):
                    message.service_address = "/proxy/t1/"
                response = getattr(module, f"{rpc}Response")()
                if rpc.startswith("Get") and rpc.endswith("s"):
                    getattr(response, f"{name.lower()}s").append(message)
                else:
                    getattr(response, name.lower()).CopyFrom(message)
                if hasattr(response, "config"):
                    response.config.CopyFrom(
                        struct_pb2.Struct(fields={"description": struct_pb2.Value(string_value="work")})
                    )
                return response
        raise AssertionError(f"unexpected {rpc}")


class FakeSession:
    def __init__(self) -> None:
        self.api = Stub()
        self.username = "ann"
        self.token = "token"
        self.master = MasterAddress(host="master.example", port=8090)


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> FakeSession:
    fake = FakeSession()
    monkeypatch.setattr(CliState, "session", lambda self, auto_login=True: fake)
    return fake


def cairn(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("group", list(KINDS))
def test_every_kind_lists_describes_kills_reprioritises_and_prints_logs(
    group: str, session: FakeSession
) -> None:
    _, name, noun = KINDS[group]
    listed = cairn(group, "list")
    assert "t1" in listed and "ann" in listed and "RUNNING" in listed
    assert "t1" in cairn(group, "describe", "t1") and "description: work" in cairn(group, "describe", "t1")
    assert cairn(group, "kill", "t1", "t2") == f"Killed {noun} t1\nKilled {noun} t2\n"
    assert cairn(group, "set-priority", "t1", "20") == f"Set the priority of {noun} t1 to 20\n"
    assert cairn(group, "logs", "t1") == "hello\n"
    asked = [(rpc, request) for rpc, request in session.api.calls if rpc != "TaskLogs"]
    id_field = f"{name.lower()}_id"
    assert [rpc for rpc, _ in asked] == [
        f"Get{name}s",
        f"Get{name}",
        f"Get{name}",
        f"Kill{name}",
        f"Kill{name}",
        f"Set{name}Priority",
    ]
    assert list(asked[0][1].users) == ["ann"]  # mine unless --all
    assert [getattr(request, id_field) for _, request in asked[1:]] == ["t1", "t1", "t1", "t2", "t1"]
    assert asked[-1][1].priority == 20


def test_only_the_kinds_served_over_http_open_as_a_url(session: FakeSession) -> None:
    assert cairn("notebook", "open", "t1") == "http://master.example:8080/proxy/t1/\n"
    assert cairn("tensorboard", "open", "t1") == "http://master.example:8080/proxy/t1/\n"
    assert "No such command" in CliRunner().invoke(cli, ["cmd", "open", "t1"]).output


def test_tensorboards_list_what_they_show(session: FakeSession) -> None:
    header = cairn("tensorboard", "list").splitlines()[1]
    assert "Experiments" in header and "Trials" in header and "Resource pool" not in header
    assert "Exit status" in cairn("cmd", "list").splitlines()[1]


def test_a_notebook_starts_and_prints_its_url_once_it_answers(session: FakeSession) -> None:
    assert cairn("notebook", "start", "--slots", "0").endswith("http://master.example:8080/proxy/t1/\n")
    (launch,) = [request for rpc, request in session.api.calls if rpc == "LaunchNotebook"]
    assert launch.config["resources"]["slots"] == 0


def test_each_kind_launches_with_what_is_its_own(session: FakeSession, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("resources: {slots: 2}\ndescription: mine\n")
    assert cairn("cmd", "run", "-d", "--config-file", str(config), "--slots", "0", "echo hi") == "t1\n"
    assert cairn("shell", "start", "-d") == "t1\n"
    assert cairn("tensorboard", "start", "-d", "3", "-t", "7") == "t1\n"
    launches = {rpc: request for rpc, request in session.api.calls if rpc.startswith("Launch")}
    command = launches["LaunchCommand"].config
    assert (command["entrypoint"], command["resources"]["slots"], command["description"]) == (
        ["echo hi"],
        0,
        "mine",
    )
    board = launches["LaunchTensorboard"]
    assert (list(board.experiment_ids), list(board.trial_ids)) == ([3], [7])
    assert "entrypoint" not in launches["LaunchShell"].config
