"""Determined's routes of the interactive task kinds, served by one implementation: every kind's
five routes are bound by their RPC names, and each answers in its kind's message: a command's
fields the message has, plus what the kind shows (a notebook's and a TensorBoard's proxy path, a
TensorBoard's experiments and trials, a shell's keys, the private one only in a launch's or a get's
answer to its owner or an admin). Refusals name the kind, as Determined's do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2

from cairn.api.v1 import api_pb2_grpc
from cairn.api.v1 import command_pb2 as cpb
from cairn.api.v1 import notebook_pb2 as npb
from cairn.api.v1 import shell_pb2 as spb
from cairn.api.v1 import tensorboard_pb2 as tpb
from services.common import interceptors
from services.common.principal import Principal
from services.master.domain.identity import agent_users
from services.master.servicers.api.service import CairnServicer
from services.master.servicers.api.task_kinds import ROUTE_NAMES, ROUTES
from services.master.store import models
from tests.unit.master.domain.harness import Master
from tests.unit.master.domain.test_domain_models import Trial
from tests.unit.master.servicer_double import Aborted, Context, api_deps


@pytest.fixture
def api(master: Master) -> CairnServicer:
    return CairnServicer(api_deps(master))


def call(api: CairnServicer, name: str, request: Any, principal: Principal) -> Any:
    token = interceptors._principal.set(principal)
    try:
        return getattr(api, name)(request, Context())
    finally:
        interceptors._principal.reset(token)


def refusal(api: CairnServicer, name: str, request: Any, principal: Principal) -> tuple[str, str]:
    with pytest.raises(Aborted) as caught:
        call(api, name, request, principal)
    return caught.value.code.name, str(caught.value)


def config(**fields: Any) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update({"resources": {"slots": 0}, **fields})
    return struct


def test_every_kinds_routes_are_bound_by_their_rpc_names() -> None:
    names = [template.format(routes.name) for routes in ROUTES for template, _ in ROUTE_NAMES]
    assert len(names) == 20 and "SetTensorboardPriority" in names and "GetNotebooks" in names
    names += ["KillGenericTask", "PauseGenericTask", "UnpauseGenericTask"]  # bound the same way
    for name in names:
        ours = getattr(CairnServicer, name)
        assert ours is not getattr(api_pb2_grpc.CairnServicer, name), name  # not the generated stub
        assert ours.__name__ == name  # the handler serves the route it is bound to


def test_each_kind_answers_in_its_own_message(master: Master, api: CairnServicer, tmp_path: Path) -> None:
    trial = Trial(master, tmp_path / "storage")
    admin = master.admin

    command = call(api, "LaunchCommand", cpb.LaunchCommandRequest(config=config(entrypoint="true")), admin)
    assert command.command.description == "Command (true)" and command.config["resources"]["slots"] == 0

    notebook = call(api, "LaunchNotebook", npb.LaunchNotebookRequest(config=config()), admin).notebook
    assert notebook.service_address == f"/proxy/{notebook.id}/" and notebook.description == "JupyterLab"
    preview = call(api, "LaunchNotebook", npb.LaunchNotebookRequest(config=config(), preview=True), admin)
    assert not preview.HasField("notebook") and preview.config["entrypoint"][2] == "cairn.notebook_server"

    launch = tpb.LaunchTensorboardRequest(experiment_ids=[trial.experiment_id, trial.experiment_id])
    board = call(api, "LaunchTensorboard", launch, admin).tensorboard
    assert (list(board.experiment_ids), board.service_address) == (
        [trial.experiment_id],
        f"/proxy/{board.id}/",
    )
    assert board.description == f"TensorBoard (Experiment {trial.experiment_id})"

    listed = call(api, "GetTensorboards", tpb.GetTensorboardsRequest(), admin)
    assert [b.id for b in listed.tensorboards] == [board.id] and listed.pagination.total == 1
    killed = call(api, "KillCommand", cpb.KillCommandRequest(command_id=command.command.id), admin)
    assert killed.command.id == command.command.id
    moved = call(
        api, "SetNotebookPriority", npb.SetNotebookPriorityRequest(notebook_id=notebook.id, priority=5), admin
    )
    assert moved.notebook.id == notebook.id
    got = call(api, "GetNotebook", npb.GetNotebookRequest(notebook_id=notebook.id), admin)
    assert got.config["resources"]["priority"] == 5


def test_a_shells_private_key_goes_only_to_its_owner_and_never_in_a_list(
    master: Master, api: CairnServicer
) -> None:
    master.add_agent("a1")
    alice, bob = master.add_user("alice"), master.add_user("bob")
    shell = call(api, "LaunchShell", spb.LaunchShellRequest(config=config()), alice).shell
    assert shell.private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert shell.public_key.startswith("ssh-ed25519 ") and shell.agent_user_group["user"] == "alice"
    assert call(api, "GetShell", spb.GetShellRequest(shell_id=shell.id), alice).shell.private_key
    theirs = call(api, "GetShell", spb.GetShellRequest(shell_id=shell.id), bob).shell
    assert theirs.private_key == "" and theirs.public_key == shell.public_key
    (listed,) = call(api, "GetShells", spb.GetShellsRequest(), alice).shells
    assert listed.private_key == "" and listed.public_key == shell.public_key


def test_refusals_name_the_kind(master: Master, api: CairnServicer) -> None:
    admin = master.admin
    command = call(api, "LaunchCommand", cpb.LaunchCommandRequest(config=config(entrypoint="true")), admin)
    command_id = command.command.id
    assert refusal(api, "GetNotebook", npb.GetNotebookRequest(notebook_id=command_id), admin) == (
        "NOT_FOUND",
        f"notebook {command_id} not found",
    )
    assert refusal(api, "KillTensorboard", tpb.KillTensorboardRequest(tensorboard_id="x"), admin) == (
        "NOT_FOUND",
        "tensorboard x not found",
    )
    assert refusal(api, "LaunchShell", spb.LaunchShellRequest(config=config(entrypoint="sh")), admin) == (
        "INVALID_ARGUMENT",
        "config.entrypoint: a shell runs Cairn's SSH server; its entrypoint cannot be set",
    )
    assert refusal(api, "LaunchTensorboard", tpb.LaunchTensorboardRequest(), admin) == (
        "INVALID_ARGUMENT",
        "experiment_ids: name experiments or trial_ids to show in TensorBoard",
    )
    priority = cpb.SetCommandPriorityRequest(command_id=command_id, priority=100)
    assert refusal(api, "SetCommandPriority", priority, admin) == (
        "INVALID_ARGUMENT",
        "priority: 100 is out of range; a priority is 1 to 99",
    )
    someone = master.add_user("someone")
    code, text = refusal(api, "KillCommand", cpb.KillCommandRequest(command_id=command_id), someone)
    assert code == "PERMISSION_DENIED" and "belongs to another user" in text


def test_a_linked_shell_shows_the_account_det_shell_open_logs_in_as(
    master: Master, api: CairnServicer
) -> None:
    master.add_agent("a1")
    alice = master.add_user("alice")
    assert alice.user_id is not None
    with master.db.transaction() as s:
        row = s.get_one(models.User, alice.user_id)
        agent_users.store(row, agent_users.AgentUserGroup(uid=1500, gid=1600, user="al", group="lab"))
    shell = call(api, "LaunchShell", spb.LaunchShellRequest(config=config()), alice).shell
    shown = dict(shell.agent_user_group)
    assert shown == {"user": "al", "uid": 1500, "group": "lab", "gid": 1600}
