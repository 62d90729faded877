"""Warm starts on the process runtime: a real agent keeps standby interpreters with the declared
modules imported, and runs the next `python3 script.py` container in one, faithfully (argv, cwd,
environment, stdin, exit status, signals, kills), falling back to a cold start for anything else."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.agent.runtime.private_mounts import Bind, in_private_mounts, split_private_mounts
from services.agent.runtime.processes import is_running
from services.agent.runtime.warm_starts import (
    PreloadError,
    preload_modules,
    python_run,
    start_environment,
    warm_command,
    warm_key,
)
from services.agent.task_user import TaskUser, resolve_task_user, run_as_ids
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import AgentProcess, command_pid, wait_terminated
from tests.unit.agent.test_agent_containers import model_definition

# A module nothing else in the agent or the Core API imports: present at the script's first line
# only if the interpreter was prepared.
PRELOADED = "xml.dom.minidom"
PRELOAD = json.dumps({"environment": {"preload_modules": [PRELOADED]}})

REPORT = f"""
import json, os, sys
print(json.dumps({{
    "warm": {PRELOADED!r} in sys.modules,
    "argv": sys.argv,
    "cwd": os.getcwd(),
    "path0": sys.path[0],
    "name": __name__,
    "marker": os.environ.get("CAIRN_TEST_MARKER"),
    "stdin": sys.stdin.read(),
    "pid": os.getpid(),
    "env": sorted(os.environ),
    "executable": sys.executable,
}}), flush=True)
sys.exit(int(os.environ.get("CAIRN_TEST_EXIT", "0")))
"""


def report_of(store: MasterStore, container_id: str) -> dict[str, object]:
    wait_until(lambda: any(m.startswith("{") for m in store.messages(container_id)), 15, "the report")
    line = next(m for m in store.messages(container_id) if m.startswith("{"))
    return dict(json.loads(line))


def run_report(
    master: MasterServer,
    store: MasterStore,
    container_id: str,
    *,
    entrypoint: str,
    env: dict[str, str],
    config: str = PRELOAD,
) -> dict[str, object]:
    store.contexts[f"alloc-{container_id}"] = model_definition({"trial.py": REPORT})
    master.double.start(
        container_id, [entrypoint], shell=True, env=env, has_context=True, container_config=config
    )
    wait_terminated(store, container_id)
    return report_of(store, container_id)


def standby_logs(agent: AgentProcess) -> list[Path]:
    return list((agent.work_dir / "standby").glob("*/standby.log"))


def standbys_ready(agent: AgentProcess, count: int) -> Callable[[], bool]:
    return lambda: len(standby_logs(agent)) >= count


def test_the_next_python_container_starts_warm_and_runs_as_a_cold_one_would(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address, slots=1)
    master.double.wait_connected()
    # The same command of an experiment that declared no preload modules starts cold.
    cold = run_report(
        master,
        store,
        "c1",
        entrypoint="python3 trial.py a 'b c'",
        env={"CAIRN_TEST_MARKER": "one"},
        config="",
    )
    assert not standby_logs(agent)
    warm = run_report(
        master,
        store,
        "c2",
        entrypoint="python3 trial.py a 'b c'",
        env={"CAIRN_TEST_MARKER": "two", "CAIRN_TEST_EXIT": "3"},
    )

    assert cold["warm"] is False and warm["warm"] is True
    for report, container_id in ((cold, "c1"), (warm, "c2")):
        folder = str(agent.container(container_id).root)
        assert report["argv"] == ["trial.py", "a", "b c"]
        assert report["cwd"] == folder and report["path0"] == folder
        assert report["name"] == "__main__" and report["stdin"] == ""
    assert (cold["marker"], warm["marker"]) == ("one", "two")
    # The same variables (PWD included, which sh exports), but the one only the second was given.
    assert set(cold["env"]) ^ set(warm["env"]) == {"CAIRN_TEST_EXIT"}  # type: ignore[arg-type]
    assert cold["executable"] == warm["executable"]
    final = store.final("c2")
    assert final is not None and final.exit_code == 3
    assert final.failure_type == apb.FAILURE_TYPE_CONTAINER_FAILED
    # Its own process, which the shim supervised: RUNNING, then TERMINATED, seqs without gaps.
    assert store.states_of("c2") == ["ASSIGNED", "STARTING", "RUNNING", "TERMINATED"]
    seqs = store.all_seqs("c2")
    assert seqs == list(range(1, len(seqs) + 1))
    assert warm["pid"] != cold["pid"]


def test_a_warm_container_is_killed_like_any_other(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address, slots=1)
    master.double.wait_connected()
    run_report(master, store, "c1", entrypoint="python3 trial.py", env={})
    wait_until(standbys_ready(agent, 1), 10, "a standby")
    code = (
        "import signal, sys, time\n"
        f"print('warm' if {PRELOADED!r} in sys.modules else 'cold', flush=True)\n"
        "signal.signal(signal.SIGTERM, lambda *_: print('ignoring SIGTERM', flush=True))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    store.contexts["alloc-c2"] = model_definition({"stubborn.py": code})
    master.double.start(
        "c2", ["python3 stubborn.py"], shell=True, has_context=True, container_config=PRELOAD, grace=1
    )
    wait_until(lambda: "ready" in store.messages("c2"), 10, "the command to be ready")
    assert "warm" in store.messages("c2")
    pid = command_pid(agent.container("c2"))
    master.double.send(
        apb.MasterMessage(kill=apb.KillContainer(command_id="kill-c2", container_id="c2", grace_seconds=1))
    )
    wait_terminated(store, "c2")
    final = store.final("c2")
    assert final is not None and final.failure_type == apb.FAILURE_TYPE_KILLED and final.exit_code == 137
    assert "ignoring SIGTERM" in store.messages("c2")
    assert not is_running(pid)


def test_commands_a_prepared_interpreter_cannot_run_faithfully_start_cold(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address, slots=1)
    master.double.wait_connected()
    run_report(master, store, "c1", entrypoint="python3 trial.py", env={})
    # c1 ran in the first kind's standby; the next one of that kind starts a moment after c1's
    # launch. Waited for: while its start is under way it holds the agent's one standby place,
    # and a container of another kind that came then would start cold at once, by design
    # (test_agent_standby_pool.py), not wait for one of its own.
    handed_over = set(standby_logs(agent))
    wait_until(lambda: bool(set(standby_logs(agent)) - handed_over), 10, "the first kind's next standby")
    shell = run_report(master, store, "c2", entrypoint="python3 trial.py > /dev/stdout", env={})
    assert shell["warm"] is False
    # Another environment at interpreter start is another kind of standby: its first container
    # waits for one of its own, from a zygote of its own (which imports first), not the first kind's.
    first_kind = set(standby_logs(agent))
    other = run_report(master, store, "c3", entrypoint="python3 trial.py", env={"PYTHONHASHSEED": "7"})
    assert other["warm"] is True
    assert set(standby_logs(agent)) - first_kind, "a standby of the second kind"
    same = run_report(master, store, "c4", entrypoint="python3 trial.py", env={"PYTHONHASHSEED": "7"})
    assert same["warm"] is True


def test_a_warm_container_outlives_its_agent_and_is_reattached(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address, slots=1)
    master.double.wait_connected()
    run_report(master, store, "c1", entrypoint="python3 trial.py", env={})
    wait_until(standbys_ready(agent, 1), 10, "a standby")
    code = (
        "import sys, time\n"
        f"print('warm' if {PRELOADED!r} in sys.modules else 'cold', flush=True)\n"
        "for i in range(1, 16):\n"
        "    print(f'line {i}', flush=True)\n"
        "    time.sleep(0.1)\n"
        "sys.exit(5)\n"
    )
    store.contexts["alloc-c2"] = model_definition({"count.py": code})
    master.double.start("c2", ["python3 count.py"], shell=True, has_context=True, container_config=PRELOAD)
    wait_until(lambda: "line 2" in store.messages("c2"), 10, "the first lines")
    pid = command_pid(agent.container("c2"))
    agent.stop(signal.SIGKILL)
    assert is_running(pid), "a warm container must survive its agent too"

    launch_agent(master.address, slots=1)
    stream = master.double.wait_connected(2)
    assert [c.container_id for c in stream.hello.containers] == ["c2"]
    wait_terminated(store, "c2", timeout=20)
    final = store.final("c2")
    assert final is not None and final.exit_code == 5
    wait_until(lambda: "line 15" in store.messages("c2"), 5, "every line")
    task_lines = [e.message for e in store.lines("c2") if e.source == "task"]
    assert task_lines == ["warm", *[f"line {i}" for i in range(1, 16)]]


def test_an_agent_with_no_warm_starts_keeps_no_standby(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address, "--no-warm-starts", slots=1)
    master.double.wait_connected()
    reports = [
        run_report(master, store, name, entrypoint="python3 trial.py", env={}) for name in ("c1", "c2")
    ]
    assert [r["warm"] for r in reports] == [False, False]
    assert not (agent.work_dir / "standby").exists()


def test_the_agent_discards_its_standbys_when_it_stops(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address, slots=2)
    master.double.wait_connected()
    run_report(master, store, "c1", entrypoint="python3 trial.py", env={})
    wait_until(standbys_ready(agent, 1), 10, "a standby")
    # Its log exists before its processes move into its folder (a forked one's moves as it is set
    # up): wait for both, the shim and its interpreter.
    folder = agent.work_dir / "standby"
    wait_until(lambda: len(standby_pids(folder)) >= 2, 10, "the standby's shim and interpreter")
    pids = standby_pids(folder)
    assert agent.stop() == 0
    wait_until(lambda: not any(is_running(pid) for pid in pids), 10, "the standbys to exit")


def standby_pids(folder: Path) -> list[int]:
    """The standby shims and their interpreters: the processes whose cwd is a standby folder."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = (proc / "cwd").resolve()
        except OSError:
            continue
        if cwd.parent == folder.resolve():
            pids.append(int(proc.name))
    return pids


TASK_USER_REPORT = f"""
import json, os, sys
with open("/tmp/mine", "w") as f:
    f.write(os.environ["CAIRN_TEST_MARKER"])
print(json.dumps({{
    "warm": {PRELOADED!r} in sys.modules,
    "uid": os.getuid(),
    "tmp": sorted(os.listdir("/tmp")),
    "cluster": open("/run/determined/info/cluster.json").read(),
    "cwd": os.getcwd(),
    "home": os.environ["HOME"],
}}), flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_task_users_warm_container_has_its_own_user_tmp_and_run_dir(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    user = resolve_task_user("cairn-task" if _has_user("cairn-task") else "nobody")
    task_root = Path(tempfile.mkdtemp(prefix="cairn-warm-tasks-", dir="/var/tmp"))
    try:
        launch_agent(master.address, "--task-user", user.name, "--task-root", str(task_root), slots=1)
        master.double.wait_connected()
        reports = []
        # The first without preload modules (cold), the second with them (warm).
        for name, config in (("w1", ""), ("w2", PRELOAD)):
            store.contexts[f"alloc-{name}"] = model_definition({"trial.py": TASK_USER_REPORT})
            env = {
                "CAIRN_TEST_MARKER": name,
                "DET_TASK_ID": f"task-{name}",
                "DET_ALLOCATION_ID": f"alloc-{name}",
            }
            master.double.start(
                name, ["python3 trial.py"], shell=True, env=env, has_context=True, container_config=config
            )
            wait_terminated(store, name)
            if "private mount namespace" in " ".join(store.messages(name)):
                pytest.skip("no private mount namespace here")
            reports.append(report_of(store, name))
        cold, warm = reports
        assert (cold["warm"], warm["warm"]) == (False, True)
        for report, name in ((cold, "w1"), (warm, "w2")):
            assert report["uid"] == user.uid
            assert report["tmp"] == ["mine"]  # its own /tmp: empty but for what it wrote
            assert f'"task_id": "task-{name}"' in str(report["cluster"])
            assert report["cwd"] == report["home"] == str(task_root / name)
            final = store.final(name)
            assert final is not None and final.exit_code == 0
        assert not Path("/tmp/mine").exists()
    finally:
        shutil.rmtree(task_root, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# -- the pure part --------------------------------------------------------------------------------


def test_which_commands_count_as_python_runs() -> None:
    env = {"PATH": str(Path(sys.executable).parent)}  # a virtualenv's bin has python3
    run = python_run(["sh", "-c", "python3 -u train.py --lr=0.1 'a b'"], env)
    assert run is not None and not run.module and run.unbuffered
    assert (run.target, run.args) == ("train.py", ("--lr=0.1", "a b"))
    module = python_run(["python3", "-m", "determined.launch.torch_distributed", "--", "x"], env)
    assert module is not None and module.module and module.target == "determined.launch.torch_distributed"
    for argv in (
        ["sh", "-c", "python3 train.py && echo done"],
        ["sh", "-c", "python3 train.py $ARGS"],
        ["sh", "-c", "cd x; python3 train.py"],
        ["python3", "-c", "print(1)"],
        ["python3", "-O", "train.py"],
        ["python3"],
        ["bash", "train.sh"],
        ["unshare", "--mount", "--", "python3", "train.py"],
    ):
        assert python_run(argv, env) is None, argv


def test_the_start_environment_leaves_out_what_names_one_task() -> None:
    env = {
        "PATH": "/bin",
        "CAIRN_TRIAL_ID": "3",
        "DET_TRIAL_ID": "3",
        "C10D_PORT": "1",
        "OMP_NUM_THREADS": "1",
        "HOME": "/tasks/c1",
    }
    # A task user's HOME is its task folder: the standby gets a folder of its own instead.
    assert start_environment(env, "/tasks/c1", "/own") == {
        "PATH": "/bin",
        "OMP_NUM_THREADS": "1",
        "HOME": "/own",
    }
    assert start_environment(env, "/elsewhere", "/own")["HOME"] == "/tasks/c1"


def test_a_task_s_own_tmpdir_does_not_make_a_kind_of_its_own() -> None:
    """Where /tmp stays shared, TMPDIR is the task's own folder beside its working directory: two
    containers that differ only in their folders are of one kind, so the second finds a standby."""
    command = warm_command(["python3", "train.py"], {"PATH": str(Path(sys.executable).parent)})
    assert command is not None

    def key_of(container: str) -> object:
        env = {"PATH": "/bin", "HOME": f"/tasks/{container}", "TMPDIR": f"/tasks/{container}.tmp"}
        return warm_key(command, ("torch",), env, f"/tasks/{container}")

    assert key_of("1.1.1.0") == key_of("1.2.1.0")
    env = {"PATH": "/bin", "TMPDIR": "/tasks/c1.tmp"}
    assert start_environment(env, "/tasks/c1", "/own")["TMPDIR"] == "/own"
    # A TMPDIR the experiment chose is the same for every container and kept.
    assert start_environment({"TMPDIR": "/scratch"}, "/tasks/c1", "/own")["TMPDIR"] == "/scratch"


def test_a_wrapped_command_is_taken_apart_exactly() -> None:
    user = TaskUser(name="t", uid=1234, gid=1235)
    binds = [Bind(Path("/agent/c1/run"), "/run/determined"), Bind(Path("/tasks/c1.tmp"), "/tmp")]
    env = {"PATH": str(Path(sys.executable).parent)}
    argv = in_private_mounts(user.run_as(["sh", "-c", "python3 train.py --x 1"]), binds)
    command = warm_command(argv, env)
    assert command is not None
    assert command.binds == tuple(binds) and command.run_as == tuple(user.run_as([]))
    assert (command.run.target, command.run.args) == ("train.py", ("--x", "1"))
    assert run_as_ids(command.run_as) == (1234, 1235)
    assert split_private_mounts(["unshare", "--mount", "x"]) == ([], ["unshare", "--mount", "x"])


def test_preload_modules_come_from_the_config_part_and_are_checked() -> None:
    assert preload_modules("") == ()
    assert preload_modules(json.dumps({"environment": {}})) == ()
    assert preload_modules(PRELOAD) == ("cairn.core", PRELOADED)
    for bad in (["torch; rm -rf /"], "torch", [1]):
        with pytest.raises(PreloadError, match=r"environment\.preload_modules"):
            preload_modules(json.dumps({"environment": {"preload_modules": bad}}))
