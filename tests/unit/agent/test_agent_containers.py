"""Running containers as processes: states, logs, model definitions, environment, signals, kills."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from collections.abc import Callable

import pytest

from cairn.agent.v1 import agent_pb2 as apb
from services.agent.containers.manager import KEEP_FINISHED
from services.agent.containers.record import ContainerRecord
from services.agent.runtime.processes import is_running
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import AgentProcess, command_pid, python_command, wait_terminated

PRINT_AND_EXIT_3 = """
import sys, time
print("out 1", flush=True)
print("err 1", file=sys.stderr, flush=True)
time.sleep(0.05)
print("out 2", flush=True)
print("WARNING: err 2", file=sys.stderr, flush=True)
sys.exit(3)
"""


def model_definition(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("form", ["shell", "exec"])
def test_a_failing_command_reports_its_lines_and_exit_code(
    form: str, master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    launch_agent(master.address)
    master.double.wait_connected()
    if form == "shell":
        script = "echo 'out 1'; echo 'err 1' >&2; sleep 0.05; echo 'out 2'; echo 'WARNING: err 2' >&2; exit 3"
        master.double.start("c1", [script], shell=True)
    else:
        master.double.start("c1", python_command(PRINT_AND_EXIT_3))
    wait_terminated(store, "c1")

    assert master.double.acks()["start-c1"].ok
    assert store.states_of("c1") == ["ASSIGNED", "STARTING", "RUNNING", "TERMINATED"]
    final = store.final("c1")
    assert final is not None
    assert final.exit_code == 3
    assert final.failure_type == apb.FAILURE_TYPE_CONTAINER_FAILED
    assert final.allocation_id == "alloc-c1"

    wait_until(lambda: len(store.lines("c1")) == 4, 5, "four lines")
    lines = store.lines("c1")
    by_type = {t: [e.message for e in lines if e.stdtype == t] for t in ("stdout", "stderr")}
    assert by_type == {"stdout": ["out 1", "out 2"], "stderr": ["err 1", "WARNING: err 2"]}
    assert [e.level for e in lines if e.message == "WARNING: err 2"] == ["WARNING"]
    # One numbering for the container's events and lines: 1..N without gaps or repeats.
    seqs = store.all_seqs("c1")
    assert seqs == list(range(1, len(seqs) + 1))
    running = next(s for s in store.state_changes("c1") if s.state == apb.CONTAINER_STATE_RUNNING)
    assert all(running.seq < e.seq < final.seq for e in lines)
    assert all(e.allocation_id == "alloc-c1" and e.source == "task" for e in lines)


def test_the_model_definition_and_the_environment_reach_the_command(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    store.contexts["alloc-c2"] = model_definition({"model/hello.txt": "hello from the model\n"})
    agent = launch_agent(master.address, slots=3, env={"CAIRN_AGENT_ONLY_SECRET": "leak"})
    master.double.wait_connected()
    names = [
        "CAIRN_AGENT_ID",
        "CAIRN_CONTAINER_ID",
        "CAIRN_SLOT_IDS",
        "CAIRN_WORKDIR",
        "CAIRN_MASTER_ADDR",
        "DET_AGENT_ID",
        "DET_CONTAINER_ID",
        "DET_SLOT_IDS",
        "DET_CLUSTER_ID",
        "DET_MASTER",
        "DET_MASTER_HOST",
        "DET_MASTER_PORT",
        "DET_MASTER_ADDR",
        "CUDA_VISIBLE_DEVICES",
        "FROM_SPEC",
        "CAIRN_AGENT_ONLY_SECRET",
        "PATH",
    ]
    code = (
        "import json, os\n"
        "print(open('model/hello.txt').read().strip())\n"
        f"print(json.dumps({{n: os.environ.get(n) for n in {names!r}}}))\n"
        "print(json.dumps({'cwd': os.getcwd()}))\n"
    )
    master.double.start(
        "c2", python_command(code), slot_ids=["0", "2"], env={"FROM_SPEC": "yes"}, has_context=True
    )
    wait_terminated(store, "c2")
    final = store.final("c2")
    assert final is not None and final.exit_code == 0, store.lines("c2", source=None)
    assert final.failure_type == apb.FAILURE_TYPE_UNSPECIFIED
    assert master.double.fetches == ["alloc-c2"]

    messages = store.messages("c2")
    assert messages[0] == "hello from the model"
    env = json.loads(messages[1])
    workdir = str(agent.container("c2").root)
    assert json.loads(messages[2]) == {"cwd": workdir}
    assert env["CAIRN_AGENT_ID"] == env["DET_AGENT_ID"] == "agent-1"
    assert env["CAIRN_CONTAINER_ID"] == env["DET_CONTAINER_ID"] == "c2"
    assert json.loads(env["CAIRN_SLOT_IDS"]) == json.loads(env["DET_SLOT_IDS"]) == [0, 2]
    assert env["CAIRN_WORKDIR"] == workdir
    assert env["CAIRN_MASTER_ADDR"] == master.address
    assert env["DET_CLUSTER_ID"] == "cluster-test"
    assert env["DET_MASTER"] == "http://127.0.0.1:18080"
    assert env["DET_MASTER_HOST"] == env["DET_MASTER_ADDR"] == "127.0.0.1"
    assert env["DET_MASTER_PORT"] == "18080"
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["FROM_SPEC"] == "yes"
    assert env["CAIRN_AGENT_ONLY_SECRET"] is None
    assert env["PATH"]
    agent_lines = [e.message for e in store.lines("c2", source="agent")]
    assert any("model definition" in m for m in agent_lines)


def test_terminate_reaches_a_command_that_handles_sigterm(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    launch_agent(master.address)
    master.double.wait_connected()
    code = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    print('got SIGTERM', flush=True)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    master.double.start("c3", python_command(code))
    wait_until(lambda: "ready" in store.messages("c3"), 10, "the command to be ready")
    master.double.send(
        apb.MasterMessage(
            signal=apb.SignalContainer(
                command_id="sig-c3", container_id="c3", signal=apb.SignalContainer.SIGNAL_TERMINATE
            )
        )
    )
    wait_terminated(store, "c3")
    final = store.final("c3")
    assert final is not None and final.exit_code == 0
    assert final.failure_type == apb.FAILURE_TYPE_UNSPECIFIED
    assert "got SIGTERM" in store.messages("c3")
    assert master.double.acks()["sig-c3"].ok


def test_kill_sigkills_a_command_that_ignores_sigterm_after_the_grace(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address)
    master.double.wait_connected()
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: print('ignoring SIGTERM', flush=True))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    master.double.start("c4", python_command(code))
    wait_until(lambda: "ready" in store.messages("c4"), 10, "the command to be ready")
    pid = command_pid(agent.container("c4"))
    sent = time.monotonic()
    master.double.send(
        apb.MasterMessage(kill=apb.KillContainer(command_id="kill-c4", container_id="c4", grace_seconds=1))
    )
    wait_terminated(store, "c4")
    took = time.monotonic() - sent
    final = store.final("c4")
    assert final is not None
    assert final.failure_type == apb.FAILURE_TYPE_KILLED
    assert final.exit_code == 137
    # SIGTERM first (it said so), SIGKILL only after the grace (137); it never slept its 60 s out.
    assert took >= 0.9, took
    assert "ignoring SIGTERM" in store.messages("c4")
    assert not is_running(pid)
    assert master.double.acks()["kill-c4"].ok


def test_kill_during_the_model_download_aborts_the_container(
    store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    master = MasterServer(store, fetch_delay=1.5)
    try:
        store.contexts["alloc-c5"] = model_definition({"x.txt": "x"})
        agent = launch_agent(master.address)
        master.double.wait_connected()
        master.double.start("c5", ["sh", "-c", "echo should not run"], has_context=True)
        wait_until(lambda: master.double.fetches, 10, "the download to begin")
        master.double.send(apb.MasterMessage(kill=apb.KillContainer(command_id="k5", container_id="c5")))
        wait_terminated(store, "c5")
        final = store.final("c5")
        assert final is not None
        assert final.failure_type == apb.FAILURE_TYPE_CONTAINER_ABORTED
        assert not final.HasField("exit_code")
        assert "RUNNING" not in store.states_of("c5")
        assert not agent.container("c5").child_info.exists()
    finally:
        master.stop()


def test_commands_that_cannot_run_end_with_a_task_error(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    launch_agent(master.address)
    master.double.wait_connected()
    master.double.start("missing-program", ["/nonexistent/program", "--flag"])
    master.double.start("unknown-slot", ["true"], slot_ids=["7"])
    store.contexts["alloc-unsafe"] = model_definition({"/etc/evil": "x"})
    master.double.start("unsafe", ["true"], has_context=True)
    master.double.start("bad/id", ["true"])
    for container_id in ("missing-program", "unknown-slot", "unsafe"):
        wait_terminated(store, container_id)
    for container_id in ("unknown-slot", "unsafe"):
        final = store.final(container_id)
        assert final is not None
        assert final.failure_type == apb.FAILURE_TYPE_TASK_ERROR, container_id
    missing = store.final("missing-program")
    assert missing is not None
    if os.geteuid() == 0:
        # As root the agent starts every task in a mount namespace of its own (its /dev/shm), through
        # a shell that execs the command: a missing program ends as in a Determined container, with
        # the shell's 127 and a log line naming it.
        assert missing.exit_code == 127
        assert any("/nonexistent/program" in m for m in store.messages("missing-program"))
    else:
        assert missing.failure_type == apb.FAILURE_TYPE_TASK_ERROR
        assert "/nonexistent/program" in missing.message
    unknown = store.final("unknown-slot")
    assert unknown is not None and "start.slot_ids" in unknown.message
    unsafe = store.final("unsafe")
    assert unsafe is not None and "absolute" in unsafe.message
    wait_until(lambda: "start-bad/id" in master.double.acks(), 5, "the ack for a bad container id")
    ack = master.double.acks()["start-bad/id"]
    assert not ack.ok and "start.container_id" in ack.error
    assert all(master.double.acks()[f"start-{c}"].ok for c in ("missing-program", "unknown-slot", "unsafe"))


def test_a_replayed_start_is_acknowledged_and_runs_once(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address)
    master.double.wait_connected()
    master.double.start("c6", ["sh", "-c", "echo once; sleep 0.3"], command_id="first")
    master.double.start("c6", ["sh", "-c", "echo once; sleep 0.3"], command_id="again")
    wait_terminated(store, "c6")
    assert store.messages("c6") == ["once"]
    acks = master.double.acks()
    assert acks["first"].ok and acks["again"].ok
    assert os.path.isdir(agent.container("c6").root)


def test_finished_containers_are_retired_and_only_the_last_few_folders_kept(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address)
    master.double.wait_connected()
    ids = [f"done-{i}" for i in range(KEEP_FINISHED + 2)]
    for container_id in ids:
        master.double.start(container_id, ["true"])
        wait_terminated(store, container_id)
    folders = agent.work_dir / "containers"
    wait_until(lambda: len(list(folders.iterdir())) == KEEP_FINISHED, 10, "old folders to be removed")
    kept = sorted(p.name for p in folders.iterdir())
    assert kept == sorted(ids[-KEEP_FINISHED:])

    def retired(container_id: str) -> bool:
        record = ContainerRecord.load(agent.container(container_id).state)
        return record is not None and record.delivered

    wait_until(lambda: all(retired(c) for c in kept), 5, "the kept containers to be retired")
    # A restarted agent has nothing left to report.
    assert agent.stop() == 0
    launch_agent(master.address)
    assert not master.double.wait_connected(2).hello.containers
