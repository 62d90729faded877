"""The local-cluster supervisor with real processes: a stand-in service (stand_in_service.py,
copied into the test's tmp dir) plays every role, over real sockets."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cairn.agent_files import WorkDirPaths
from cairn.localcluster import processes
from cairn.localcluster.paths import ClusterPaths
from cairn.localcluster.plan import ClusterOptions
from cairn.localcluster.readiness import SERVING, read_ready_file
from cairn.localcluster.record import load_record
from cairn.localcluster.supervisor import (
    ClusterAlreadyRunning,
    ClusterError,
    ClusterStartError,
    cluster_status,
    start_cluster,
    stop_cluster,
)
from cairn.localcluster.sweep import sweep_container_processes

STAND_IN_MODULE = "cairn_stand_in_service"


def alive(pid: int) -> bool:
    return processes.is_running(pid)


def wait_dead(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def stand_in_dir(tmp_path: Path) -> Path:
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    shutil.copy(Path(__file__).parent / "stand_in_service.py", code_dir / f"{STAND_IN_MODULE}.py")
    return code_dir


class OptionsFactory:
    """ClusterOptions that run the stand-in for every role on free ports; stops whatever a test
    started, and checks that nothing started from the test's directory outlives it."""

    def __init__(self, tmp_path: Path, code_dir: Path) -> None:
        self.tmp_path = tmp_path
        self.code_dir = code_dir
        self.created: list[ClusterOptions] = []

    def __call__(self, env: dict[str, str] | None = None, **overrides: Any) -> ClusterOptions:
        base = ClusterOptions(
            state_dir=self.tmp_path / "state",
            master_port=0,
            http_port=0,
            timeout_s=30.0,
            service_modules=dict.fromkeys(
                ("scheduler", "searcher", "checkpoint", "master", "agent"), STAND_IN_MODULE
            ),
            extra_env={"PYTHONPATH": str(self.code_dir), **(env or {})},
        )
        options = replace(base, **overrides)
        self.created.append(options)
        return options

    def cleanup(self) -> None:
        for options in self.created:
            stop_cluster(options.state_dir, grace_s=2.0)


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and alive(int(entry.name)):
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def make_options(tmp_path: Path, stand_in_dir: Path) -> Iterator[OptionsFactory]:
    factory = OptionsFactory(tmp_path, stand_in_dir)
    yield factory
    factory.cleanup()
    if Path("/proc").is_dir():
        assert processes_mentioning(str(tmp_path)) == []


def test_up_status_down(make_options: OptionsFactory) -> None:
    options = make_options(agents=2)
    messages: list[str] = []
    record = start_cluster(options, progress=messages.append)

    names = [p.name for p in record.processes]
    assert names == ["scheduler", "searcher", "checkpoint", "master", "agent-1", "agent-2", "watchdog"]
    services = [p for p in record.processes if p.serves]
    assert all(p.grpc_port for p in services)
    master = record.by_role("master")[0]
    assert record.master_grpc_address == f"127.0.0.1:{master.grpc_port}"
    assert record.master_http_url == f"http://127.0.0.1:{master.http_port}/"
    assert [p.agent_id for p in record.by_role("agent")] == ["agent-1", "agent-2"]
    assert any("master is ready" in m for m in messages)

    # The master was wired to the internal services' real ports, agents to the master's.
    scheduler = record.by_role("scheduler")[0]
    assert f"127.0.0.1:{scheduler.grpc_port}" in master.command
    assert record.master_grpc_address in record.by_role("agent")[0].command
    assert "--kill-containers-on-exit" in record.by_role("agent")[0].command
    # The cluster token travels in the environment, never on a command line.
    assert all(record.cluster_token not in " ".join(p.command) for p in record.processes)

    paths = ClusterPaths(options.state_dir)
    assert stat.S_IMODE(paths.record_file.stat().st_mode) == 0o600
    assert load_record(paths.record_file) == record
    for p in services:
        assert "starting with" in Path(p.log_path).read_text()

    status = cluster_status(options.state_dir)
    assert status is not None and status.healthy
    assert {s.health for s in status.processes if s.process.serves} == {SERVING}

    with pytest.raises(ClusterAlreadyRunning, match="already running"):
        start_cluster(options)

    ready = {p.name: read_ready_file(Path(p.ready_file)) for p in services}
    helpers = [int(data["helper_pid"]) for data in ready.values() if data]
    trials = [int(data["trial_pid"]) for data in ready.values() if data and "trial_pid" in data]
    assert len(helpers) == 6 and len(trials) == 2
    assert all(alive(pid) for pid in helpers + trials)

    report = stop_cluster(options.state_dir, grace_s=5.0)
    assert report.had_record
    assert [(s.name, s.how) for s in report.processes] == [
        ("watchdog", "terminated"),
        ("agent-1", "terminated"),
        ("agent-2", "terminated"),
        ("master", "terminated"),
        ("scheduler", "terminated"),
        ("searcher", "terminated"),
        ("checkpoint", "terminated"),
    ]
    assert sorted(s.pgid for s in report.swept) == sorted(trials)
    # No orphans: services, the helpers left in their groups, and the trials in their own sessions.
    for pid in [p.pid for p in record.processes] + helpers + trials:
        assert wait_dead(pid), pid
    assert not paths.record_file.exists()
    assert cluster_status(options.state_dir) is None

    again = stop_cluster(options.state_dir)
    assert not again.stopped_anything


def test_early_exit_stops_everything_and_reports_the_log(make_options: OptionsFactory) -> None:
    options = make_options(env={"STAND_IN_FAIL_ROLE": "master"})
    with pytest.raises(ClusterStartError) as caught:
        start_cluster(options)
    error = caught.value
    assert error.process == "master"
    assert "exited early (exit code 3)" in str(error)
    assert any("failing on purpose" in line for line in error.tail)
    assert len(error.tail) <= 20
    assert error.log_path == ClusterPaths(options.state_dir).log_file("master")

    paths = ClusterPaths(options.state_dir)
    for name in ("scheduler", "searcher", "checkpoint"):
        assert "stand-in internal stopping" in paths.log_file(name).read_text(), name
        ready = read_ready_file(paths.ready_file(name))
        assert ready is not None
        assert wait_dead(int(ready["pid"])) and wait_dead(int(ready["helper_pid"]))
    assert not paths.record_file.exists()


def test_agent_never_welcomed_times_out_with_a_reason(make_options: OptionsFactory) -> None:
    options = make_options(env={"STAND_IN_AGENT_NO_ID": "1"}, timeout_s=4.0)
    started = time.monotonic()
    with pytest.raises(ClusterStartError) as caught:
        start_cluster(options)
    assert time.monotonic() - started < 20
    assert caught.value.process == "agent-1"
    assert "lacks agent_id" in str(caught.value)
    # The agent's trial was swept along with the services.
    work_dir = WorkDirPaths(ClusterPaths(options.state_dir).agent_work_dir("agent-1"))
    trial_pid = json.loads(work_dir.container("c-1").child_info.read_text())["pid"]
    assert wait_dead(trial_pid)


def test_a_process_ignoring_sigterm_is_killed(make_options: OptionsFactory) -> None:
    options = make_options(agents=0, env={"STAND_IN_IGNORE_SIGTERM": "master"})
    start_cluster(options)
    report = stop_cluster(options.state_dir, grace_s=1.0)
    outcomes = {s.name: s.how for s in report.processes}
    assert outcomes["master"] == "killed"
    assert outcomes["scheduler"] == "terminated"


def test_master_port_in_use_is_refused_before_starting_anything(make_options: OptionsFactory) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        options = make_options(master_port=port)
        with pytest.raises(ClusterError, match=f"port {port} .* already in use"):
            start_cluster(options)
    assert not ClusterPaths(options.state_dir).record_file.exists()


def test_sweep_kills_recorded_process_groups(tmp_path: Path) -> None:
    trial = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; "
         "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"],
        start_new_session=True,
    )  # fmt: skip
    try:
        child = WorkDirPaths(tmp_path / "agent-1").container("abc").child_info
        child.parent.mkdir(parents=True)
        child.write_text(json.dumps({"pid": trial.pid, "pgid": os.getpgid(trial.pid)}))
        deadline = time.monotonic() + 5
        while len(processes.group_members(trial.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(processes.group_members(trial.pid)) == 2

        swept = sweep_container_processes([tmp_path / "agent-1"])

        assert [(s.container, s.pgid, s.what) for s in swept] == [("abc", trial.pid, "command")]
        assert trial.wait(timeout=5) == -signal.SIGKILL
        assert processes.group_members(trial.pid) == []
        assert sweep_container_processes([tmp_path / "agent-1"]) == []
    finally:
        if trial.poll() is None:
            os.killpg(trial.pid, signal.SIGKILL)
            trial.wait()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="command lines are checked through /proc")
def test_recorded_pid_running_something_else_is_not_ours(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        # Until the child has exec'd, /proc shows the parent's command line.
        deadline = time.monotonic() + 5
        while b"time.sleep(30)" not in Path(f"/proc/{other.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert processes.is_recorded_process_running(
            other.pid, [sys.executable, "-c", "import time; time.sleep(30)"]
        )
        assert not processes.is_recorded_process_running(other.pid, [sys.executable, "-m", "services.master"])
    finally:
        other.kill()
        other.wait()


# SYS_exit (one thread, not the group) by architecture.
_SYS_EXIT = {"x86_64": 60, "aarch64": 93}


@pytest.mark.skipif(os.uname().machine not in _SYS_EXIT, reason="SYS_exit is known for x86_64 and aarch64")
def test_a_child_whose_main_thread_ended_first_runs_until_its_exit_code_is_known(tmp_path: Path) -> None:
    """The kernel shows a process's main thread as a zombie while its other threads still run, and
    waitpid cannot reap it yet: processes.is_running must not say it ended before exit_code can
    say how (an e2e test read exit_code None right after is_running said False)."""
    child = (
        "import ctypes, threading, time\n"
        "threading.Thread(target=time.sleep, args=(1.5,)).start()\n"
        f"ctypes.CDLL(None).syscall({_SYS_EXIT[os.uname().machine]}, 0)\n"
    )
    pid = processes.spawn([sys.executable, "-c", child], tmp_path / "child.log", dict(os.environ)).pid
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child's main thread never ended"
        time.sleep(0.01)
    assert processes.is_running(pid)  # its other thread still runs
    assert processes.exit_code(pid) is None
    while processes.is_running(pid):
        assert time.monotonic() < deadline, "the child never ended"
        time.sleep(0.01)
    assert processes.exit_code(pid) == 0
