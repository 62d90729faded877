"""Tasks run as the Linux account their owner or workspace is linked to (Determined's
agent_user_group): the agent runs the command as the start's run_as instead of --task-user, hands
its folders over to that account, and makes the account's names resolvable inside the task (a
private /etc/passwd and /etc/group where the machine lacks them). Without run_as: the task user."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.agent import task_accounts
from services.agent.requests import RunAsRequest
from services.agent.runtime.docker_spec import (
    ContainerSpec,
    DockerDefaults,
    SlotShare,
    container_spec,
    with_account,
)
from services.agent.task_user import TaskUser, split_run_as
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import AgentProcess, wait_terminated
from tests.unit.agent.test_agent_containers import model_definition
from tests.unit.agent.test_agent_task_isolation import unprivileged_user

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="switching users needs root and setpriv"
)
# A uid and gid this machine has no entry for (checked below): the task must still find its names.
UNKNOWN_UID, UNKNOWN_GID = 47113, 47114
PROBE = 'echo "ids=$(id -u):$(id -g)"; echo "names=$(id -un):$(id -gn)"; touch mine && echo "cwd writable"'


@pytest.fixture
def task_root() -> Iterator[Path]:
    """A task root other users can reach (pytest's tmp_path is in root's owner-only folder)."""
    base = Path(tempfile.mkdtemp(prefix="cairn-task-root-", dir="/var/tmp"))
    base.chmod(0o755)
    yield base / "agent-1"
    shutil.rmtree(base, ignore_errors=True)


def task_lines(store: MasterStore, container_id: str) -> list[str]:
    wait_until(
        lambda: any("writable" in e.message for e in store.lines(container_id)), 10, "the probe's lines"
    )
    return [e.message for e in store.lines(container_id) if e.source == "task"]


def test_a_run_as_is_checked_before_its_names_reach_an_account_file() -> None:
    good = RunAsRequest(uid=1500, gid=1500, user="alice", group="lab")
    assert task_accounts.problem(good) is None
    assert "run_as.user" in (task_accounts.problem(RunAsRequest(1500, 1500, "evil:x:0:0", "lab")) or "")
    assert "run_as.group" in (task_accounts.problem(RunAsRequest(1500, 1500, "alice", "a\nb")) or "")
    assert "run_as.uid" in (task_accounts.problem(RunAsRequest(-1, 1500, "alice", "lab")) or "")


def test_a_linked_account_unknown_here_gets_its_own_passwd_and_group_lines(tmp_path: Path) -> None:
    assert not task_accounts.known_uid(UNKNOWN_UID) and not task_accounts.known_gid(UNKNOWN_GID)
    run_as = RunAsRequest(UNKNOWN_UID, UNKNOWN_GID, "alice", "lab")
    binds = task_accounts.account_files(run_as, tmp_path, Path("/work/c1"))
    assert [b.target for b in binds] == ["/etc/passwd", "/etc/group"]
    passwd = (tmp_path / "passwd").read_text()
    assert passwd.startswith(Path("/etc/passwd").read_text())
    assert passwd.endswith(f"alice:x:{UNKNOWN_UID}:{UNKNOWN_GID}:alice:/work/c1:/bin/sh\n")
    assert (tmp_path / "group").read_text().endswith(f"lab:x:{UNKNOWN_GID}:\n")
    # A uid and gid the machine knows keep the machine's entries (and their supplementary groups).
    assert task_accounts.account_files(RunAsRequest(0, 0, "alice", "lab"), tmp_path / "no", Path("/")) == []


def test_a_linked_account_is_switched_to_like_the_task_user() -> None:
    task_user = TaskUser(name="cairn-task", uid=999, gid=999, setpriv="/usr/bin/setpriv")
    unknown = task_accounts.linked_user(RunAsRequest(UNKNOWN_UID, UNKNOWN_GID, "alice", "lab"), task_user)
    prefix, command = split_run_as(unknown.run_as(["id"]))
    assert command == ["id"] and "--clear-groups" in prefix and f"--reuid={UNKNOWN_UID}" in prefix
    # An account this machine knows keeps its supplementary groups (NFS access is decided by them).
    nobody = pwd.getpwnam(unprivileged_user())
    known = task_accounts.linked_user(RunAsRequest(nobody.pw_uid, nobody.pw_gid, "x", "y"), task_user)
    assert "--init-groups" in split_run_as(known.run_as(["id"]))[0]


def test_the_docker_runtime_runs_the_container_as_the_linked_ids() -> None:
    spec = container_spec(
        {},
        command=["id"],
        env={},
        share=SlotShare(gpu_uuids=(), cpu_slots=1),
        labels={},
        defaults=DockerDefaults(image="img"),
        user=(1500, 1600, "alice", "lab"),
    )
    assert spec.user == "1500:1600" and spec.owner() == (1500, 1600)
    assert (spec.user_name, spec.group_name) == ("alice", "lab")
    assert ContainerSpec.from_json(spec.to_json()).user == "1500:1600"
    unlinked = container_spec(
        {},
        command=["id"],
        env={},
        share=SlotShare(gpu_uuids=(), cpu_slots=1),
        labels={},
        defaults=DockerDefaults(image="img"),
    )
    assert unlinked.user == "" and unlinked.owner() is None


def test_the_containers_account_files_gain_a_line_only_for_an_id_the_image_lacks() -> None:
    image = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534::/nonexistent:/bin/false"
    added = with_account(image, 1500, "alice:x:1500:1600:alice:/w:/bin/sh")
    assert added == image + "\nalice:x:1500:1600:alice:/w:/bin/sh\n"
    assert with_account(image, 65534, "other:x:65534:1:::") is None  # the image's entry stays
    assert with_account("", 7, "g:x:7:") == "g:x:7:\n"


@needs_root
def test_the_command_runs_as_its_linked_account_and_resolves_its_names(
    master: MasterServer,
    store: MasterStore,
    launch_agent: Callable[..., AgentProcess],
    task_root: Path,
) -> None:
    agent = launch_agent(master.address, "--task-user", unprivileged_user(), "--task-root", str(task_root))
    master.double.wait_connected()
    store.contexts["alloc-l1"] = model_definition({"model/hello.txt": "hello\n"})
    run_as = apb.RunAs(uid=UNKNOWN_UID, gid=UNKNOWN_GID, user="alice", group="lab")
    master.double.start("l1", [PROBE], shell=True, has_context=True, run_as=run_as)
    try:
        wait_terminated(store, "l1")
    except AssertionError:
        raise AssertionError(agent.log_text()[-3000:] + str(store.lines("l1"))) from None
    final = store.final("l1")
    assert final is not None and final.exit_code == 0, agent.log_text()
    lines = task_lines(store, "l1")
    assert lines == [f"ids={UNKNOWN_UID}:{UNKNOWN_GID}", "names=alice:lab", "cwd writable"], lines
    assert (task_root / "l1" / "mine").stat().st_uid == UNKNOWN_UID
    assert (task_root / "l1" / "model" / "hello.txt").stat().st_uid == UNKNOWN_UID
    # The machine's own account files are untouched: the lines lived in the task's namespace only.
    assert "alice:x:" not in Path("/etc/passwd").read_text()


@needs_root
def test_without_a_link_the_command_still_runs_as_the_task_user(
    master: MasterServer,
    store: MasterStore,
    launch_agent: Callable[..., AgentProcess],
    task_root: Path,
) -> None:
    name = unprivileged_user()
    launch_agent(master.address, "--task-user", name, "--task-root", str(task_root))
    master.double.wait_connected()
    master.double.start("u1", [PROBE], shell=True)
    wait_terminated(store, "u1")
    entry = pwd.getpwnam(name)
    assert task_lines(store, "u1")[0] == f"ids={entry.pw_uid}:{entry.pw_gid}"


def test_an_agent_that_cannot_switch_users_refuses_a_linked_start(
    master: MasterServer,
    store: MasterStore,
    launch_agent: Callable[..., AgentProcess],
) -> None:
    # No --task-user: the agent runs tasks as its own account and cannot switch to another.
    launch_agent(master.address)
    master.double.wait_connected()
    run_as = apb.RunAs(uid=UNKNOWN_UID, gid=UNKNOWN_GID, user="alice", group="lab")
    master.double.start("n1", ["true"], run_as=run_as)
    wait_terminated(store, "n1")
    final = store.final("n1")
    assert final is not None and final.failure_type == apb.FAILURE_TYPE_TASK_ERROR
    assert "start.spec.run_as" in final.message and "needs an agent run as root" in final.message


WARM_REPORT = """
import json, os, pwd, sys
print(json.dumps({
    "warm": "xml.dom.minidom" in sys.modules,
    "ids": [os.getuid(), os.getgid()],
    "name": pwd.getpwuid(os.getuid()).pw_name,
}), flush=True)
"""


@needs_root
def test_a_linked_accounts_python_starts_warm_as_that_account(
    master: MasterServer,
    store: MasterStore,
    launch_agent: Callable[..., AgentProcess],
    task_root: Path,
) -> None:
    """A warm start (a prepared interpreter, runtime/standbys.py) is a kind of its own per account,
    and gets the account's passwd lines bound into its namespace at the hand-over."""
    launch_agent(master.address, "--task-user", unprivileged_user(), "--task-root", str(task_root), slots=1)
    master.double.wait_connected()
    run_as = apb.RunAs(uid=UNKNOWN_UID, gid=UNKNOWN_GID, user="alice", group="lab")
    config = json.dumps({"environment": {"preload_modules": ["xml.dom.minidom"]}})
    reports = []
    for name in ("w1", "w2"):  # the second finds the standby the first left ready
        store.contexts[f"alloc-{name}"] = model_definition({"trial.py": WARM_REPORT})
        master.double.start(
            name, ["python3 trial.py"], shell=True, has_context=True, container_config=config, run_as=run_as
        )
        wait_terminated(store, name, timeout=60)
        if "private mount namespace" in " ".join(store.messages(name)):
            pytest.skip("no private mount namespace here")
        wait_until(lambda n=name: any(m.startswith("{") for m in store.messages(n)), 15, "the report")
        reports.append(json.loads(next(m for m in store.messages(name) if m.startswith("{"))))
    assert reports[1] == {"warm": True, "ids": [UNKNOWN_UID, UNKNOWN_GID], "name": "alice"}, reports
    assert reports[0]["ids"] == [UNKNOWN_UID, UNKNOWN_GID] and reports[0]["name"] == "alice"
