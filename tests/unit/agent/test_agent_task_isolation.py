"""Trial code kept away from the control plane: the shim's and the task's environments hold no
secret, tasks run as --task-user in folders of their own outside the agent's work dir, and the
work dir is owner-only."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.agent.containers.task_env import basic_environment
from services.agent.runtime.process_runtime import shim_environment
from services.agent.runtime.processes import is_running
from services.agent.settings import parse_settings
from services.agent.task_user import TaskDirs, TaskUser, TaskUserError, isolation_warning, resolve_task_user
from services.agent.work_dir import WorkDir
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import AgentProcess, command_pid, wait_terminated
from tests.unit.agent.test_agent_containers import model_definition

AGENT_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/root",
    "LC_ALL": "C.UTF-8",
    "DOCKER_HOST": "unix:///run/docker.sock",
    "PYTHONPATH": "/opt/extra",
    "CAIRN_CLUSTER_TOKEN": "s3cret",
    "CAIRN_DB_URL": "postgresql://cairn:pw@db/cairn",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


def unprivileged_user() -> str:
    for name in ("nobody", "cairn-task"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    pytest.skip("no unprivileged user on this machine")


def test_the_shim_gets_the_basics_and_no_secret() -> None:
    env = shim_environment(AGENT_ENV, Path("/code"))
    assert env == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/root",
        "LC_ALL": "C.UTF-8",
        "DOCKER_HOST": "unix:///run/docker.sock",
        "PYTHONPATH": os.pathsep.join(["/code", "/opt/extra"]),
    }


def test_the_task_gets_none_of_the_agents_secrets() -> None:
    env = basic_environment(AGENT_ENV, None)
    assert not {"CAIRN_CLUSTER_TOKEN", "CAIRN_DB_URL", "AWS_SECRET_ACCESS_KEY", "DOCKER_HOST"} & set(env)
    assert env["PATH"] == "/usr/bin:/bin"


def test_a_task_user_runs_the_command_through_setpriv() -> None:
    user = TaskUser(name="cairn-task", uid=999, gid=998, setpriv="/usr/bin/setpriv")
    assert user.run_as(["sh", "-c", "id"]) == [
        "/usr/bin/setpriv",
        "--reuid=999",
        "--regid=998",
        "--init-groups",
        "--pdeathsig=KILL",
        "--",
        "sh",
        "-c",
        "id",
    ]
    assert user.environment(Path("/tasks/c1")) == {
        "USER": "cairn-task",
        "LOGNAME": "cairn-task",
        "HOME": "/tasks/c1",
    }


def test_an_unknown_or_root_task_user_is_refused_naming_the_flag() -> None:
    with pytest.raises(TaskUserError, match=r"^--task-user: no user 'no-such-user-xyz'"):
        resolve_task_user("no-such-user-xyz")
    with pytest.raises(TaskUserError, match=r"^--task-user: 'root' is root"):
        resolve_task_user("root")


@pytest.mark.skipif(os.geteuid() == 0, reason="as root every user can be switched to")
def test_without_root_another_task_user_is_refused() -> None:
    with pytest.raises(TaskUserError, match="needs root"):
        resolve_task_user(unprivileged_user())


def test_tasks_run_as_the_agents_own_user_with_a_warning() -> None:
    warning = isolation_warning(None)
    assert warning is not None and "--task-user" in warning


@needs_root
def test_a_different_task_user_is_no_warning() -> None:
    assert isolation_warning(resolve_task_user(unprivileged_user())) is None


def test_task_root_must_be_outside_the_work_dir(tmp_path: Path) -> None:
    user = unprivileged_user()
    base = ["--master", "127.0.0.1:1", "--agent-id", "a1", "--work-dir", str(tmp_path / "work")]
    with pytest.raises(SystemExit):
        parse_settings([*base, "--task-user", user, "--task-root", str(tmp_path / "work" / "tasks")])
    with pytest.raises(SystemExit):
        parse_settings([*base, "--task-root", str(tmp_path / "tasks")])  # without --task-user
    with pytest.raises(SystemExit):
        parse_settings([*base, "--task-user", user, "--runtime", "docker"])
    settings = parse_settings([*base, "--task-user", user])
    assert settings.task_root == Path("/var/lib/cairn/tasks/a1")
    settings = parse_settings([*base, "--task-user", user, "--task-root", str(tmp_path / "tasks")])
    assert (settings.task_user, settings.task_root) == (user, (tmp_path / "tasks").resolve())


def test_the_work_dir_is_owner_only(tmp_path: Path) -> None:
    work_dir = WorkDir(tmp_path / "work")
    work_dir.lock()
    try:
        assert stat.S_IMODE((tmp_path / "work").stat().st_mode) == 0o700
    finally:
        work_dir.unlock()


@needs_root
def test_task_folders_belong_to_the_task_user_and_no_one_else(tmp_path: Path) -> None:
    user = resolve_task_user(unprivileged_user())
    dirs = TaskDirs(tmp_path / "tasks", user)
    dirs.prepare_root()
    folder = dirs.create("c1")
    (folder / "model").mkdir()
    (folder / "model" / "train.py").write_text("print(1)\n")
    (folder / "link").symlink_to("/etc/hostname")
    dirs.hand_over(folder)
    assert stat.S_IMODE(dirs.root.stat().st_mode) == 0o711
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in (folder, folder / "model", folder / "model" / "train.py", folder / "link"):
        assert path.lstat().st_uid == user.uid
    assert Path("/etc/hostname").stat().st_uid != user.uid  # links are not followed
    tmp = dirs.tmp_path("c1")
    assert (tmp.stat().st_uid, stat.S_IMODE(tmp.stat().st_mode)) == (user.uid, 0o700)
    dirs.remove("c1")
    assert not folder.exists() and not tmp.exists()


@pytest.fixture
def task_root() -> Iterator[Path]:
    """A task root the task user can reach (pytest's tmp_path is in root's owner-only folder),
    outside /tmp, which tasks get a private one of."""
    base = Path(tempfile.mkdtemp(prefix="cairn-task-root-", dir="/var/tmp"))
    base.chmod(0o755)
    yield base / "agent-1"
    shutil.rmtree(base, ignore_errors=True)


PROBE = r"""
echo "uid=$(id -u)"
echo "cwd=$(pwd)"
cat model/hello.txt
LAUNCH="$AGENT_WORK/containers/c1/.cairn-agent/launch.json"
for target in "$AGENT_WORK/agent.lock" "$LAUNCH" /proc/$PPID/environ; do
  if cat "$target" > /dev/null 2>&1; then echo "READ $target"; else echo "refused $target"; fi
done
if ls "$AGENT_WORK" > /dev/null 2>&1; then echo "LISTED the work dir"
else echo "refused listing the work dir"; fi
touch written-by-the-task && echo "cwd writable"
env | grep -c '^CAIRN_CLUSTER_TOKEN=' || true
"""


@needs_root
def test_the_command_runs_as_the_task_user_outside_the_work_dir(
    master: MasterServer,
    store: MasterStore,
    launch_agent: Callable[..., AgentProcess],
    task_root: Path,
) -> None:
    user = resolve_task_user(unprivileged_user())
    agent = launch_agent(master.address, "--task-user", user.name, "--task-root", str(task_root))
    master.double.wait_connected()
    store.contexts["alloc-c1"] = model_definition({"model/hello.txt": "hello from the model\n"})
    master.double.start("c1", [PROBE], shell=True, has_context=True, env={"AGENT_WORK": str(agent.work_dir)})
    wait_terminated(store, "c1")
    final = store.final("c1")
    assert final is not None and final.exit_code == 0, agent.log_text()
    wait_until(lambda: any("writable" in e.message for e in store.lines("c1")), 5, "the probe's lines")
    lines = [e.message for e in store.lines("c1") if e.source == "task"]
    launch = agent.work_dir / "containers" / "c1" / ".cairn-agent" / "launch.json"
    assert lines == [
        f"uid={user.uid}",
        f"cwd={task_root / 'c1'}",
        "hello from the model",
        f"refused {agent.work_dir / 'agent.lock'}",
        f"refused {launch}",
        lines[5],  # the shim's pid
        "refused listing the work dir",
        "cwd writable",
        "0",
    ]
    assert lines[5].startswith("refused /proc/")
    assert stat.S_IMODE(agent.work_dir.stat().st_mode) == 0o700
    assert (task_root / "c1" / "written-by-the-task").stat().st_uid == user.uid


COUNT_TO_20 = 'i=0; while [ $i -lt 20 ]; do i=$((i+1)); echo "line $i"; sleep 0.1; done; exit 7'


@needs_root
def test_a_restarted_agent_reattaches_a_task_user_command_and_kills_one(
    master: MasterServer,
    store: MasterStore,
    launch_agent: Callable[..., AgentProcess],
    task_root: Path,
) -> None:
    flags = ("--task-user", unprivileged_user(), "--task-root", str(task_root))
    agent = launch_agent(master.address, *flags)
    master.double.wait_connected()
    master.double.start("r1", [COUNT_TO_20], shell=True)
    master.double.start("k1", ["sleep 60"], shell=True)
    wait_until(lambda: len(store.lines("r1")) >= 3, 10, "the first lines")
    pid = command_pid(agent.container("r1"))
    assert Path(f"/proc/{pid}").stat().st_uid == pwd.getpwnam(flags[1]).pw_uid
    agent.stop(signal.SIGKILL)
    assert is_running(pid), "the container must survive its agent"

    launch_agent(master.address, *flags)
    stream = master.double.wait_connected(2)
    assert sorted(c.container_id for c in stream.hello.containers) == ["k1", "r1"]
    master.double.send(
        apb.MasterMessage(kill=apb.KillContainer(command_id="kill-k1", container_id="k1", grace_seconds=1))
    )
    wait_terminated(store, "r1", timeout=20)
    wait_terminated(store, "k1", timeout=20)
    final = store.final("r1")
    assert final is not None and final.exit_code == 7
    wait_until(lambda: len(store.lines("r1")) == 20, 5, "every line")
    assert [e.message for e in store.lines("r1")] == [f"line {i}" for i in range(1, 21)]
    killed = store.final("k1")
    assert killed is not None and killed.exit_code != 0


@needs_root
def test_a_determined_task_sees_its_run_dir_as_the_task_user(
    master: MasterServer,
    store: MasterStore,
    launch_agent: Callable[..., AgentProcess],
    task_root: Path,
) -> None:
    user = resolve_task_user(unprivileged_user())
    launch_agent(master.address, "--task-user", user.name, "--task-root", str(task_root))
    master.double.wait_connected()
    script = 'echo "uid=$(id -u)"; grep -o \'"task_id": "[^"]*"\' /run/determined/info/cluster.json'
    master.double.start(
        "d1", [script], shell=True, env={"DET_TASK_ID": "task-9", "DET_ALLOCATION_ID": "alloc-d1"}
    )
    wait_terminated(store, "d1")
    notes = " ".join(e.message for e in store.lines("d1", source="agent"))
    if "cannot give tasks a private mount namespace" in notes:
        pytest.skip("no private mount namespace here")
    final = store.final("d1")
    assert final is not None and final.exit_code == 0, store.messages("d1")
    wait_until(lambda: len(store.lines("d1")) == 2, 5, "two lines")
    lines = [e.message for e in store.lines("d1")]
    assert lines == [f"uid={user.uid}", '"task_id": "task-9"']


# Determined's DeepSpeed launcher writes /tmp/pid_server-<allocation>: the same name from two tasks.
SAME_TMP_NAME = """
test -z "$(ls -A /tmp)" && echo "empty /tmp"
echo "$MINE" > /tmp/pid_server-alloc && sleep 1 && cat /tmp/pid_server-alloc
echo "TMPDIR=$TMPDIR"
"""


@needs_root
def test_each_task_users_task_has_a_private_tmp_removed_after_it(
    master: MasterServer,
    store: MasterStore,
    launch_agent: Callable[..., AgentProcess],
    task_root: Path,
) -> None:
    user = resolve_task_user(unprivileged_user())
    launch_agent(master.address, "--task-user", user.name, "--task-root", str(task_root))
    master.double.wait_connected()
    for name in ("t1", "t2"):
        master.double.start(name, [SAME_TMP_NAME], shell=True, env={"MINE": f"written by {name}"})
    for name in ("t1", "t2"):
        wait_terminated(store, name)
    if "cannot give tasks a private mount namespace" in " ".join(store.messages("t1")):
        pytest.skip("no private mount namespace here")
    for name in ("t1", "t2"):
        final = store.final(name)
        assert final is not None and final.exit_code == 0, store.messages(name)
        wait_until(lambda: len(store.lines(name)) == 3, 5, "three lines")  # noqa: B023
        assert [e.message for e in store.lines(name)] == ["empty /tmp", f"written by {name}", "TMPDIR=/tmp"]
    assert not Path("/tmp/pid_server-alloc").exists()  # the host's /tmp was never touched
    assert not (task_root / "t1.tmp").exists() and not (task_root / "t2.tmp").exists()
    assert (task_root / "t1").is_dir()  # its working folder stays a while for a look


@pytest.fixture
def env_under_tmp() -> Iterator[Path]:
    """A task environment under the host's /tmp, as a clone under /tmp has its .venv-task: its
    python3 says where it runs from."""
    base = Path(tempfile.mkdtemp(prefix="cairn-task-env-", dir="/tmp"))
    base.chmod(0o755)
    (base / "bin").mkdir(mode=0o755)
    python3 = base / "bin" / "python3"
    python3.write_text('#!/bin/sh\necho "python3 of the task env"\n')
    python3.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@needs_root
def test_a_task_env_under_tmp_keeps_tmp_shared_so_the_task_still_sees_it(
    master: MasterServer,
    store: MasterStore,
    launch_agent: Callable[..., AgentProcess],
    task_root: Path,
    env_under_tmp: Path,
) -> None:
    """A private /tmp would hide the environment and `python3` would be Debian's (a new user's
    `make demo` in a clone under /tmp saw every trial fail: no module named 'torch')."""
    user = resolve_task_user(unprivileged_user())
    flags = ("--task-user", user.name, "--task-root", str(task_root), "--task-env", f"venv={env_under_tmp}")
    launch_agent(master.address, *flags)
    master.double.wait_connected()
    master.double.start("v1", ['python3; echo "TMPDIR=$TMPDIR"'], shell=True)
    wait_terminated(store, "v1")
    final = store.final("v1")
    assert final is not None and final.exit_code == 0, store.messages("v1")
    wait_until(lambda: len(store.lines("v1")) == 2, 5, "two lines")
    assert [e.message for e in store.lines("v1")] == [
        "python3 of the task env",
        f"TMPDIR={task_root / 'v1.tmp'}",
    ]
    notes = " ".join(e.message for e in store.lines("v1", source="agent"))
    assert f"the Python environment 'venv' ({env_under_tmp}) is under /tmp" in notes
