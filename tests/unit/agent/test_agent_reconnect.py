"""Nothing lost across a master restart, an agent SIGKILL, or an agent shutdown."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from cairn.agent.v1 import agent_pb2 as apb
from services.agent.runtime.processes import is_running
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import (
    AgentProcess,
    command_pid,
    python_command,
    shim_pid,
    wait_terminated,
)


def counting(lines: int, every: float, exit_code: int = 0) -> list[str]:
    return python_command(
        "import sys, time\n"
        f"for i in range({lines}):\n"
        "    print(f'line {i}', flush=True)\n"
        f"    time.sleep({every})\n"
        f"sys.exit({exit_code})\n"
    )


def assert_exactly_once(store: MasterStore, container_id: str, lines: int) -> None:
    assert store.messages(container_id) == [f"line {i}" for i in range(lines)]
    seqs = store.all_seqs(container_id)
    assert seqs == list(range(1, len(seqs) + 1)), "a gap or a repeat in the container's seqs"


def test_master_restart_mid_run_resends_what_was_not_acknowledged(
    store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    first = MasterServer(store, ack=False)
    agent = launch_agent(first.address)
    first.double.wait_connected()
    first.double.start("r1", counting(60, 0.02))
    wait_until(lambda: len(store.lines("r1")) >= 10, 10, "some lines at the first master")
    first.stop()

    second = MasterServer(store, port=first.port)
    try:
        stream = second.double.wait_connected(timeout=20)
        assert stream.hello.reconnect is True
        assert [c.container_id for c in stream.hello.containers] == ["r1"]
        wait_terminated(store, "r1", timeout=20)
        wait_until(lambda: len(store.lines("r1")) == 60, 5, "every line")
        assert_exactly_once(store, "r1", 60)
        final = store.final("r1")
        assert final is not None and final.exit_code == 0
        # The first master acknowledged nothing, so what it got was sent again to the second.
        resent = [key for key, count in store.received.items() if key[0] == "r1" and count > 1]
        assert resent, "nothing was resent after the reconnect"
        assert agent.proc.poll() is None
    finally:
        second.stop()


def test_agent_sigkilled_and_restarted_reattaches_its_running_container(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address)
    master.double.wait_connected()
    master.double.start("r2", counting(30, 0.1, exit_code=7))
    wait_until(lambda: len(store.lines("r2")) >= 5, 10, "the first lines")
    pid = command_pid(agent.container("r2"))
    agent.stop(signal.SIGKILL)
    time.sleep(0.5)
    assert is_running(pid), "the container must survive its agent"

    again = launch_agent(master.address)
    stream = master.double.wait_connected(2)
    assert stream.hello.reconnect is False  # a new agent process
    [reported] = stream.hello.containers
    assert reported.container_id == "r2"
    assert reported.allocation_id == "alloc-r2"
    assert reported.state == apb.CONTAINER_STATE_RUNNING
    assert not reported.HasField("exit_code")
    wait_terminated(store, "r2", timeout=20)
    final = store.final("r2")
    assert final is not None
    assert final.exit_code == 7
    assert final.failure_type == apb.FAILURE_TYPE_CONTAINER_FAILED
    wait_until(lambda: len(store.lines("r2")) == 30, 5, "every line")
    assert_exactly_once(store, "r2", 30)
    assert again.proc.poll() is None


def test_an_exit_while_the_agent_was_away_is_reported_after_its_restart(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address)
    master.double.wait_connected()
    master.double.start("r3", counting(20, 0.03, exit_code=5))
    wait_until(lambda: store.lines("r3"), 10, "the first line")
    agent.stop(signal.SIGKILL)
    wait_until(agent.container("r3").exit_report.exists, 10, "the command to end")

    launch_agent(master.address)
    [reported] = master.double.wait_connected(2).hello.containers
    assert reported.container_id == "r3"
    assert reported.state == apb.CONTAINER_STATE_TERMINATED
    assert reported.exit_code == 5
    wait_terminated(store, "r3")
    final = store.final("r3")
    assert final is not None and final.exit_code == 5
    wait_until(lambda: len(store.lines("r3")) == 20, 5, "every line")
    assert_exactly_once(store, "r3", 20)


def test_a_container_the_master_does_not_keep_is_killed(
    store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    first = MasterServer(store)
    agent = launch_agent(first.address)
    first.double.wait_connected()
    first.double.start("r4", python_command("import time; time.sleep(60)"))
    pid = command_pid(agent.container("r4"))
    first.stop()
    second = MasterServer(store, port=first.port, keep=lambda hello: [])
    try:
        assert [c.container_id for c in second.double.wait_connected(timeout=20).hello.containers] == ["r4"]
        wait_until(lambda: not is_running(pid), 10, "the unwanted container to be killed")
    finally:
        second.stop()


def test_sigterm_leaves_containers_running_for_a_later_agent(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address)
    master.double.wait_connected()
    master.double.start("r5", python_command("import time; print('up', flush=True); time.sleep(60)"))
    pid = command_pid(agent.container("r5"))
    assert agent.stop() == 0
    assert is_running(pid)
    assert store.final("r5") is None


def test_kill_containers_on_exit_leaves_no_process_behind(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    agent = launch_agent(master.address, "--kill-containers-on-exit")
    master.double.wait_connected()
    stubborn = (
        "import signal, time, subprocess, sys\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    master.double.start("k1", python_command(stubborn), grace=1)
    master.double.start("k2", ["sh", "-c", "echo ready; sleep 60"], grace=5)
    wait_until(lambda: "ready" in store.messages("k1") and "ready" in store.messages("k2"), 10, "both ready")
    pids = [command_pid(agent.container(c)) for c in ("k1", "k2")]
    pids += [shim_pid(agent.container(c)) for c in ("k1", "k2")]
    assert all(is_running(p) for p in pids)

    assert agent.stop(timeout=30) == 0
    assert not [p for p in pids if is_running(p)], "a container process outlived the agent"
    for container_id in ("k1", "k2"):
        final = store.final(container_id)
        assert final is not None, f"{container_id}: termination not reported"
        # The agent's own shutdown, not the code's failure: the master does not count it.
        assert final.failure_type == apb.FAILURE_TYPE_AGENT_FAILED
