"""Shells are tasks that serve SSH through the master's proxy: the master makes a key pair per
shell in the shell's own transaction, hands the public key to the task, gives the private key only
to the shell's owner or an admin, and its proxy reaches the shell's port as a TCP stream, without a
session (Determined's tunnel sends none; the key is the credential) but never for another user's
session, and never once the shell has ended."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from services.common.principal import Principal
from services.master.domain.allocations import proxy_access, task_services
from services.master.domain.kernel.errors import InvalidArgument, PermissionDenied, Unauthenticated
from services.master.domain.kernel.states import TaskKind
from services.master.domain.task_kinds import shell_keys
from services.master.domain.task_kinds.shell import SHELL, SHELL_ENTRYPOINT
from services.master.domain.tasks import tasks
from services.master.store import models
from tests.unit.master.domain.harness import Master


def ready_shell(master: Master, owner: Principal) -> tuple[str, models.Allocation]:
    master.add_agent("a1", address="10.1.2.3")
    task_id = master.launch(TaskKind.SHELL, {"resources": {"slots": 0}}, owner)
    with master.db.read() as s:
        alloc = s.query(models.Allocation).filter_by(task_id=task_id).one()
        s.expunge(alloc)
    master.run_containers(alloc.id)
    task_services.report_ready(master.ctx, Principal(allocation_id=alloc.id), alloc.id)
    return task_id, alloc


def target(master: Master, principal: Principal | None, task_id: str) -> proxy_access.ProxyTarget:
    with master.db.read() as s:
        return proxy_access.proxy_target(s, principal, task_id)


def test_a_shell_runs_cairns_ssh_server_with_its_own_public_key(master: Master) -> None:
    owner = master.add_user("alice")
    task_id, alloc = ready_shell(master, owner)
    (start_cmd,) = [c for _, c in master.hub.commands("start") if c.allocation_id == alloc.id]
    env = start_cmd.spec.environment
    assert tuple(start_cmd.spec.entrypoint) == SHELL_ENTRYPOINT
    port = task_services.service_port(master.ctx, alloc.port_offset or 0)
    assert (env["CAIRN_SERVICE_HOST"], env["CAIRN_SERVICE_PORT"]) == ("10.1.2.3", str(port))
    with master.db.read() as s:
        task = s.get_one(models.Task, task_id)
        keys = shell_keys.keys_for(s, owner, task)
    assert env["CAIRN_SHELL_PUBLIC_KEY"] == keys.public_key
    assert keys.public_key.startswith("ssh-ed25519 ") and keys.public_key.endswith(f"cairn-shell-{task_id}")
    # The private key is a real OpenSSH key whose public half is the one the server was given.
    private = serialization.load_ssh_private_key(keys.private_key.encode(), password=None)
    assert isinstance(private, ed25519.Ed25519PrivateKey)
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    assert keys.public_key.startswith(public.decode())
    assert "PRIVATE" not in str(task.config)  # the key is not in the config anyone may read


def test_only_the_owner_or_an_admin_gets_the_private_key(master: Master) -> None:
    owner, other = master.add_user("alice"), master.add_user("bob")
    task_id, _ = ready_shell(master, owner)
    with master.db.read() as s:
        task = s.get_one(models.Task, task_id)
        assert shell_keys.keys_for(s, owner, task).private_key
        assert shell_keys.keys_for(s, master.admin, task).private_key
        theirs = shell_keys.keys_for(s, other, task)
    assert theirs.private_key == "" and theirs.public_key.startswith("ssh-ed25519 ")


def test_every_shell_gets_a_key_pair_of_its_own() -> None:
    first, second = shell_keys.generate("a"), shell_keys.generate("b")
    assert first.private_key != second.private_key and first.public_key != second.public_key


def test_a_shell_entrypoint_cannot_be_replaced() -> None:
    with pytest.raises(InvalidArgument, match=r"config\.entrypoint"):
        SHELL.config_for({"entrypoint": "rm -rf /"}, {})
    assert SHELL.config_for({}, {})["entrypoint"] == list(SHELL_ENTRYPOINT)


def test_the_proxy_reaches_a_shell_as_tcp_without_a_session_but_not_for_another_users(
    master: Master,
) -> None:
    owner, other = master.add_user("alice"), master.add_user("bob")
    task_id, alloc = ready_shell(master, owner)
    expected = f"10.1.2.3:{task_services.service_port(master.ctx, alloc.port_offset or 0)}"
    assert target(master, None, task_id) == proxy_access.ProxyTarget(address=expected, tcp=True)
    assert target(master, owner, task_id).tcp and target(master, master.admin, task_id).tcp
    with pytest.raises(PermissionDenied, match="another user"):
        target(master, other, task_id)
    with master.ctx.unit_of_work() as w:
        tasks.kill(master.ctx, w, tasks.load(w, task_id))
    master.settle()
    (container,) = [c for _, c in master.hub.commands("kill")]
    master.exit(container.container_id, 143)
    with pytest.raises(proxy_access.TaskEnded, match="has ended"):
        target(master, None, task_id)


def test_a_notebook_still_needs_a_session(master: Master) -> None:
    master.add_agent("a1")
    task_id = master.launch(TaskKind.NOTEBOOK)
    with pytest.raises(Unauthenticated, match="authentication required"):
        target(master, None, task_id)
    with pytest.raises(Unauthenticated):
        target(master, None, "no-such-task")  # nothing is told about tasks without a session


def _served(master: Master, task_id: str) -> task_services.ServedPort | None:
    with master.db.read() as s:
        task = s.get_one(models.Task, task_id)
        alloc = s.query(models.Allocation).filter_by(task_id=task_id).one()
        return task_services.served_port(master.ctx, task, alloc)


def test_serving_tasks_list_their_port_as_determined_once_placed(master: Master) -> None:
    owner = master.add_user("dora")
    notebook = master.launch(TaskKind.NOTEBOOK, {"resources": {"slots": 0}}, owner)
    command = master.launch(TaskKind.COMMAND, {"entrypoint": ["true"], "resources": {"slots": 0}}, owner)
    # Not placed yet (no agent): its port comes with its port block.
    assert _served(master, notebook) is None
    shell, alloc = ready_shell(master, owner)
    master.settle()
    port = task_services.service_port(master.ctx, alloc.port_offset or 0)
    # Determined's default service: the proxy names it by the task's id; a shell's is a TCP stream
    # reached without a session.
    assert _served(master, shell) == task_services.ServedPort(shell, port, tcp=True, unauthenticated=True)
    served = _served(master, notebook)
    assert served is not None and (served.service_id, served.tcp, served.unauthenticated) == (
        notebook,
        False,
        False,
    )
    assert served.port != port  # each allocation its own port block
    assert _served(master, command) is None  # a command serves nothing
