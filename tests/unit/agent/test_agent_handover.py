"""Early hand-over: a start that names containers still on its slots (their tasks said they are
exiting) is prepared at once and its command started once they have ended; bounded by the
agent's --handover-wait, and stoppable while it waits."""

from __future__ import annotations

from collections.abc import Callable

from cairn.agent.v1 import agent_pb2 as apb
from tests.unit.agent.agent_master_double import MasterServer, MasterStore, wait_until
from tests.unit.agent.agent_processes import AgentProcess, python_command, wait_terminated

# Prints when it ends; sleeps first (the "exiting" process still finishing).
ENDING = "import time\ntime.sleep({s})\nprint('ended', repr(time.time()), flush=True)\n"
STARTED = "import time\nprint('started', repr(time.time()), flush=True)\n"


# A predecessor that outlives any test's wait unless it is killed: what ends before it did not wait
# for it, however slow the machine.
LINGERS_S = 600.0


def kill(master: MasterServer, store: MasterStore, container_id: str) -> None:
    master.double.send(
        apb.MasterMessage(
            kill=apb.KillContainer(command_id=f"kill-{container_id}", container_id=container_id)
        )
    )
    wait_terminated(store, container_id)


def stamp(store: MasterStore, container_id: str, word: str) -> float:
    [line] = [m for m in store.messages(container_id) if m.startswith(word)]
    return float(line.split()[1])


def agent_notes(store: MasterStore, container_id: str) -> list[str]:
    return [e.message for e in store.lines(container_id, source="agent")]


def test_the_next_command_starts_once_the_exiting_one_has_ended(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    launch_agent(master.address, slots=1)
    master.double.wait_connected()
    master.double.start("c1", python_command(ENDING.format(s=1.0)), slot_ids=["0"])
    wait_until(lambda: "RUNNING" in store.states_of("c1"), 10, "c1 running")
    master.double.start("c2", python_command(STARTED), slot_ids=["0"], after=["c1"])
    wait_until(lambda: "STARTING" in store.states_of("c2"), 10, "c2 prepared")
    assert "RUNNING" not in store.states_of("c2")
    wait_terminated(store, "c2")
    final = store.final("c2")
    assert final is not None and final.exit_code == 0
    assert stamp(store, "c2", "started") >= stamp(store, "c1", "ended")
    assert any("waiting for the slot's previous container to exit: c1" in n for n in agent_notes(store, "c2"))


def test_a_predecessor_already_gone_holds_nothing(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    launch_agent(master.address, slots=1)
    master.double.wait_connected()
    master.double.start("c1", python_command(ENDING.format(s=0)), slot_ids=["0"])
    wait_terminated(store, "c1")
    master.double.start("c2", python_command(STARTED), slot_ids=["0"], after=["c1", "never-seen"])
    wait_terminated(store, "c2")
    assert not any("waiting" in n for n in agent_notes(store, "c2"))


def test_a_predecessor_that_lingers_past_the_wait_runs_beside_the_next(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    launch_agent(master.address, "--handover-wait", "0.5", slots=1)
    master.double.wait_connected()
    master.double.start("c1", python_command(ENDING.format(s=LINGERS_S)), slot_ids=["0"])
    wait_until(lambda: "RUNNING" in store.states_of("c1"), 10, "c1 running")
    master.double.start("c2", python_command(STARTED), slot_ids=["0"], after=["c1"])
    wait_terminated(store, "c2")
    assert store.final("c1") is None  # still running: c2 did not wait for it
    assert any("has not ended 0.5 s after its slots were handed on" in n for n in agent_notes(store, "c2"))
    kill(master, store, "c1")


def test_a_start_waiting_for_its_predecessor_can_be_killed(
    master: MasterServer, store: MasterStore, launch_agent: Callable[..., AgentProcess]
) -> None:
    launch_agent(master.address, slots=1)
    master.double.wait_connected()
    master.double.start("c1", python_command(ENDING.format(s=LINGERS_S)), slot_ids=["0"])
    wait_until(lambda: "RUNNING" in store.states_of("c1"), 10, "c1 running")
    master.double.start("c2", ["sh", "-c", "echo should not run"], slot_ids=["0"], after=["c1"])
    wait_until(lambda: "STARTING" in store.states_of("c2"), 10, "c2 prepared")
    kill(master, store, "c2")
    final = store.final("c2")
    assert final is not None and final.failure_type == apb.FAILURE_TYPE_CONTAINER_ABORTED
    assert "RUNNING" not in store.states_of("c2")
    assert store.final("c1") is None  # ended while c1 still runs: not held until c1 ended
    kill(master, store, "c1")
