"""Zygotes: a real agent imports a kind's preload modules once, in a zygote, and forks its standbys
from it; each trial still runs in a process of its own under its own shim, as the task user and in
a private mount namespace where it would be; kinds a zygote may not serve keep their own standbys."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from services.agent.runtime import zygote as zygote_module
from services.agent.runtime.processes import is_running, start_ticks, watch_pid_exit
from services.agent.runtime.zygotes import (
    Zygote,
    ZygoteError,
    _writable_by_others,
    eligibility,
    import_environment,
    untrusted_paths,
)
from services.agent.task_user import resolve_task_user
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import AgentProcess, command_pid, shim_pid, wait_terminated
from tests.unit.agent.test_agent_containers import model_definition
from tests.unit.agent.test_agent_warm_starts import _has_user, report_of, standby_logs, standbys_ready

PRELOAD = json.dumps({"environment": {"preload_modules": ["numpy"]}})
ZYGOTE = Path(zygote_module.__file__)

# What a trial shows of how it was started, and two draws from the generators a fork would share.
REPORT = """
import ctypes, json, os, random, sys
try:
    import numpy  # the interpreter a task user finds first may not have it
except ImportError:
    numpy = None
print(json.dumps({
    "warm": "numpy" in sys.modules and "cairn.core" in sys.modules,
    "pid": os.getpid(),
    "ppid": os.getppid(),
    "pgid": os.getpgid(0),
    "uid": os.getuid(),
    "random": random.random(),
    "numpy": float(numpy.random.rand()) if numpy else None,
    "tmp": sorted(os.listdir("/tmp")),
    "setting": os.environ.get("MY_SETTING"),
    "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),  # PR_GET_DUMPABLE
}), flush=True)
"""


def _ppid(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1])


def _zygote_pids(agent: AgentProcess) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
            parent = _ppid(int(entry.name))
        except OSError:
            continue
        # The agent's own child (a supervisor just forked from it looks the same for a moment).
        if (
            len(cmdline) > 2
            and cmdline[1] == b"-c"
            and cwd.startswith(str(agent.work_dir / "standby-zygotes"))
            and parent == agent.proc.pid
        ):
            pids.append(int(entry.name))
    return pids


def _run(master: MasterServer, store: MasterStore, name: str, env: dict[str, str] | None = None) -> None:
    store.contexts[f"alloc-{name}"] = model_definition(
        {"trial.py": REPORT + "import time; time.sleep(0.5)\n"}
    )
    master.double.start(
        name, ["python3 trial.py"], shell=True, env=env or {}, has_context=True, container_config=PRELOAD
    )


def _a_standby_beyond(agent: AgentProcess, earlier: set[Path]) -> Callable[[], bool]:
    return lambda: bool(set(standby_logs(agent)) - earlier)


def _agent_with_a_standby(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess], slots: int
) -> AgentProcess:
    """An agent whose first container (c1) ran, in the standby it waited for its kind's zygote to
    fork, and which has the next standby ready since."""
    agent = launch_agent(master.address, slots=slots)
    master.double.wait_connected()
    _run(master, store, "c1")
    wait_terminated(store, "c1")
    wait_until(standbys_ready(agent, 1), 20, "a standby")
    return agent


def test_one_zygote_forks_the_standbys_of_a_kind_and_each_trial_is_its_own_process(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = _agent_with_a_standby(master, store, launch_agent, slots=2)
    zygotes = _zygote_pids(agent)
    assert len(zygotes) == 1

    tree = {}
    for name in ("c2", "c3"):
        _run(master, store, name)
        command = command_pid(agent.container(name))
        shim = shim_pid(agent.container(name))
        # zygote -> the container's shim -> its command, in a process group of its own
        tree[name] = (_ppid(shim), _ppid(command) == shim)
        wait_terminated(store, name)
        wait_until(standbys_ready(agent, 1), 20, "the next standby")
    reports = {name: report_of(store, name) for name in ("c1", "c2", "c3")}

    # The first of the kind too: it waited for the zygote's imports instead of importing beside it.
    assert [reports[n]["warm"] for n in ("c1", "c2", "c3")] == [True, True, True]
    assert tree == {"c2": (zygotes[0], True), "c3": (zygotes[0], True)}
    assert _zygote_pids(agent) == zygotes  # one zygote served every standby of the kind
    for name in ("c2", "c3"):
        assert reports[name]["pgid"] == reports[name]["pid"]
        final = store.final(name)
        assert final is not None and final.exit_code == 0
    # Forked from one process, yet each trial draws its own numbers.
    assert reports["c2"]["random"] != reports["c3"]["random"]
    assert reports["c2"]["numpy"] != reports["c3"]["numpy"]


def test_the_zygote_ends_with_the_agent_and_its_trials_do_not(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = _agent_with_a_standby(master, store, launch_agent, slots=1)
    code = "import sys, time\nprint('numpy' in sys.modules, flush=True)\ntime.sleep(3)\nsys.exit(4)\n"
    store.contexts["alloc-c2"] = model_definition({"trial.py": code})
    master.double.start("c2", ["python3 trial.py"], shell=True, has_context=True, container_config=PRELOAD)
    command = command_pid(agent.container("c2"))
    zygotes = _zygote_pids(agent)
    assert len(zygotes) == 1
    agent.stop(signal.SIGKILL)
    wait_until(lambda: not is_running(zygotes[0]), 10, "the zygote to end")
    assert is_running(command), "a forked trial must survive its agent and its zygote"

    launch_agent(master.address, slots=1)
    master.double.wait_connected(2)
    wait_terminated(store, "c2", timeout=20)
    final = store.final("c2")
    assert final is not None and final.exit_code == 4
    assert "True" in store.messages("c2")


def test_a_kind_whose_zygote_died_gets_standbys_of_its_own(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = _agent_with_a_standby(master, store, launch_agent, slots=1)
    for pid in _zygote_pids(agent):
        os.kill(pid, signal.SIGKILL)
    for name in ("c2", "c3"):
        _run(master, store, name)
        wait_terminated(store, name)
        wait_until(standbys_ready(agent, 1), 20, "the next standby")
    # c2 took the standby forked before the zygote died; c3's was started as a standby of its own.
    assert [report_of(store, n)["warm"] for n in ("c2", "c3")] == [True, True]
    assert "start without a zygote" in agent.log_path.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_root_zygote_serves_task_users_but_not_what_it_cannot_import_as_they_would(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    user = resolve_task_user("cairn-task" if _has_user("cairn-task") else "nobody")
    task_root = Path(tempfile.mkdtemp(prefix="cairn-zygote-tasks-", dir="/var/tmp"))
    # Kinds: plain; with a variable of the experiment's own (imported without, given to the fork);
    # with one the loader reads; with one numpy looks up as it loads (the zygote sees it did).
    kinds = {
        "t": {},
        "m": {"MY_SETTING": "kept"},
        "u": {"LD_PRELOAD": ""},
        "n": {"NUMPY_MADVISE_HUGEPAGE": "0"},
    }
    try:
        agent = launch_agent(master.address, "--task-user", user.name, "--task-root", str(task_root), slots=1)
        master.double.wait_connected()
        parents = {}
        for kind, env in kinds.items():
            for name in (f"{kind}1", f"{kind}2"):
                earlier = set(standby_logs(agent))
                _run(master, store, name, env)
                command_pid(agent.container(name))
                parents[name] = _ppid(shim_pid(agent.container(name)))
                zygotes = _zygote_pids(agent)
                if name == "t2":
                    environ = Path(f"/proc/{zygotes[0]}/environ").read_text().split("\0")
                    started_home = dict(line.split("=", 1) for line in environ if "=" in line)["HOME"]
                wait_terminated(store, name)
                if "private mount namespace" in " ".join(store.messages(name)):
                    pytest.skip("no private mount namespace here")
                # This kind's next standby (its zygote may import first), not an earlier kind's.
                wait_until(_a_standby_beyond(agent, earlier), 20, "a standby of this kind")
            # Both of a kind are warm: forked by a zygote, or a standby the agent started itself
            # (the first waited for it, and where the zygote refused after its imports, for that).
            for name in (f"{kind}1", f"{kind}2"):
                forked = parents[name] in zygotes
                assert forked == (kind in ("t", "m")), name
                assert forked or parents[name] == agent.proc.pid
        reports = {name: report_of(store, name) for name in parents}
        assert {n: r["warm"] for n, r in reports.items()} == dict.fromkeys(parents, True)
        for report in reports.values():
            # The task user, its own empty /tmp, and dumpable as after setpriv's exec (core dumps,
            # debuggers), however it was started.
            assert report["uid"] == user.uid and report["tmp"] == [] and report["dumpable"] == 1
        assert reports["m2"]["setting"] == "kept"
        # The zygote started with its own folder as HOME (no user site-packages in the shared
        # /tmp); it imported with HOME=/tmp in a namespace whose /tmp was its own.
        assert started_home.startswith(str(agent.work_dir))
        log = agent.log_path.read_text()
        assert "its environment sets LD_PRELOAD, which takes effect as a program loads" in log
        assert "the preloaded modules looked up the experiment's NUMPY_MADVISE_HUGEPAGE as they loaded" in log
    finally:
        shutil.rmtree(task_root, ignore_errors=True)


# -- the pure part --------------------------------------------------------------------------------


def test_a_root_zygote_imports_without_the_experiments_variables_and_refuses_load_time_ones() -> None:
    env = {"PATH": "/usr/bin", "LC_ALL": "C", "OMP_NUM_THREADS": "1", "TMPDIR": "/tmp", "MY_DATA": "/d"}
    assert import_environment(env, drops_privileges=True) == {
        "PATH": "/usr/bin",
        "LC_ALL": "C",
        "OMP_NUM_THREADS": "1",
        "TMPDIR": "/tmp",
    }
    assert eligibility(env, drops_privileges=True) is None
    for name in ("PYTHONPATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "KMP_AFFINITY", "GLIBC_TUNABLES"):
        reason = eligibility({**env, name: "x"}, drops_privileges=True)
        assert reason is not None and name in reason
    # A TMPDIR of the experiment's own is withheld from the imports like any other of its variables.
    assert "TMPDIR" not in import_environment({**env, "TMPDIR": "/home/u"}, drops_privileges=True)
    # Without a change of user the zygote imports as the trial would, under all of it.
    odd = {**env, "PYTHONPATH": "/x", "LD_PRELOAD": "/x.so"}
    assert eligibility(odd, drops_privileges=False) is None
    assert import_environment(odd, drops_privileges=False) == odd


def test_a_root_zygote_preloads_only_libraries_it_knows_and_no_locale_from_a_path() -> None:
    env = {"PATH": "/usr/bin", "LANG": "C.UTF-8"}
    assert eligibility(env, True, ["cairn.core", "torch", "torch._dynamo", "numpy.linalg"]) is None
    for module in ("unittest.__main__", "test.autotest", "mypkg", "torch.testing", "numpy.f2py.__main__"):
        reason = eligibility(env, True, ["cairn.core", module])
        assert reason is not None and module in reason
    assert eligibility(env, False, ["unittest.__main__"]) is None  # imported as the trial would be
    for name, value in (("LANG", "/home/u/locale"), ("LC_ALL", "/x"), ("TZ", "/home/u/zone")):
        reason = eligibility({**env, name: value}, True, ["numpy"])
        assert reason is not None and name in reason


def test_the_zygotes_finder_refuses_a_module_anyone_but_root_could_have_changed(tmp_path: Path) -> None:
    zygote = _zygote_namespace()
    (tmp_path / "planted.py").write_text("raise SystemExit('planted code ran')\n")
    origins = zygote["_TrustedOrigins"]()  # type: ignore[operator]
    sys.path.insert(0, str(tmp_path))
    sys.meta_path.insert(0, origins)
    try:
        with pytest.raises(ImportError, match="not imported as root: planted comes from /tmp"):
            importlib.import_module("planted")
        if _writable_by_others(Path(json.__file__)) is None:
            importlib.import_module("json.tool")  # the standard library, root's here, is let through
    finally:
        sys.meta_path.remove(origins)
        sys.path.remove(str(tmp_path))
        sys.modules.pop("planted", None)
    assert len(origins.refused) == 1 and origins.refused[0].startswith("planted from /tmp")


def _zygote_namespace() -> dict[str, object]:
    # zygote.py runs in the task's interpreter without the agent's code: taken as it is run.
    namespace: dict[str, object] = {"__name__": "zygote_under_test"}
    exec(compile(ZYGOTE.read_text(), str(ZYGOTE), "exec"), namespace)
    return namespace


def test_a_package_with_anything_anyone_but_root_could_change_is_not_preloaded_as_root(
    tmp_path: Path,
) -> None:
    untrusted_package_files = _zygote_namespace()["_untrusted_package_files"]
    package = tmp_path / "mypackage"
    package.mkdir()
    (package / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    try:
        found = untrusted_package_files(["mypackage.sub"])  # type: ignore[operator]
    finally:
        sys.path.remove(str(tmp_path))
    assert found is not None and found.startswith("/tmp")
    assert untrusted_package_files(["not_installed_anywhere"]) is None  # type: ignore[operator]


def test_closing_a_zygote_ends_a_wait_for_its_imports_at_once(tmp_path: Path) -> None:
    # A preload that takes its time (a zygote of the agent's own user: no checks of where from).
    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(60)\n")
    python = shutil.which("python3")
    assert python is not None
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)}
    zygote = Zygote(python, ["slow_import"], env, tmp_path / "zygote")
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            zygote.wait_ready(timeout=60)
        except ZygoteError as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)
    started = time.monotonic()
    zygote.close(timeout=5)
    waiter.join(10)
    assert not waiter.is_alive() and len(outcome) == 1 and zygote.closed
    assert time.monotonic() - started < 6
    assert not zygote.alive()


def test_a_path_is_trusted_only_if_root_alone_may_change_it(tmp_path: Path) -> None:
    assert _writable_by_others(Path("/usr/bin")) is None
    assert _writable_by_others(Path("/usr/bin/not-there/at-all")) is None  # /usr/bin decides
    found = _writable_by_others(tmp_path / "python")
    assert found is not None and "writable by group or others" in found  # /tmp is everyone's
    if os.geteuid() == 0:
        mine = Path(tempfile.mkdtemp(prefix="cairn-trust-", dir="/var/tmp"))
        try:
            os.chmod(mine, 0o755)
            os.chmod("/var/tmp", os.stat("/var/tmp").st_mode)  # unchanged; /var/tmp is sticky, 1777
            assert _writable_by_others(mine) is not None
            owned = mine / "lib"
            owned.mkdir(mode=0o755)
            os.chown(owned, 65534, 65534)
            found = _writable_by_others(owned / "site-packages")
            assert found is not None and "owned by uid 65534" in found
        finally:
            shutil.rmtree(mine, ignore_errors=True)


def test_an_interpreter_in_a_folder_others_may_write_is_not_trusted(tmp_path: Path) -> None:
    python = shutil.which("python3")
    assert python is not None
    found = untrusted_paths(python, {"PATH": f"{tmp_path}:/usr/bin"})
    assert found is not None and str(tmp_path).startswith(found.split(" (")[0])


def test_the_end_of_a_process_that_is_not_our_child_is_seen_at_once() -> None:
    # A grandchild: its parent (sh) exits at once, so it is not this process's to wait for.
    out = subprocess.run(
        ["sh", "-c", "sleep 1 >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    pid = int(out.stdout.strip())
    ended = threading.Event()
    assert watch_pid_exit(pid, start_ticks(pid), ended.set, name="test-watch")
    assert not ended.wait(0.1)
    assert ended.wait(5), "the watcher must see the process end"
    # A pid whose start time is not the one expected is someone else's: ended already.
    other = threading.Event()
    assert watch_pid_exit(os.getpid(), -1, other.set, name="test-watch") and other.is_set()


def test_an_interpreter_root_does_not_own_alone_is_not_even_run(tmp_path: Path) -> None:
    marker = tmp_path / "it-ran"
    fake = tmp_path / "python3"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\n")
    fake.chmod(0o755)
    found = untrusted_paths(str(fake), {"PATH": "/usr/bin"})
    assert found is not None and found.startswith(str(tmp_path)[:4])  # /tmp: everyone's
    assert not marker.exists()
