"""The container manager without processes: a runtime whose shim is simulated through the files it
would write, to pin down orderings that real processes only hit by chance."""

from __future__ import annotations

import time
from pathlib import Path

from services.agent.containers.container import classify_exit
from services.agent.containers.manager import ContainerManager
from services.agent.containers.outbox import Outbox
from services.agent.containers.preparation import Preparer
from services.agent.containers.record import ContainerRecord
from services.agent.containers.states import ContainerState, FailureType
from services.agent.containers.task_env import MasterFacts
from services.agent.requests import StartRequest
from services.agent.runtime.events import EventTailer, EventWriter, LogLine, StateEvent
from services.agent.runtime.jsonfile import write_json_atomic
from services.agent.runtime.process_runtime import ProcessRuntime, ShimHandle
from services.agent.runtime.protocol import ContainerPaths, ExitReport


class FinishingShim(ProcessRuntime):
    """Its shim is 'alive' until asked for its exit report, and finishes right then: it writes its
    last lines and exit.json between the agent's look at the event file and its look at the exit."""

    def __init__(self, paths: ContainerPaths, next_seq: int) -> None:
        super().__init__()
        self.paths = paths
        self.next_seq = next_seq
        self.finished = False

    def is_alive(self, handle: ShimHandle) -> bool:
        return not self.finished

    def exit_report(self, paths: ContainerPaths) -> ExitReport | None:
        if not self.finished:
            writer = EventWriter(paths.events, self.next_seq)
            writer.write_logs([LogLine("stdout", "last words"), LogLine("stderr", "really last")])
            writer.close()
            write_json_atomic(paths.exit_report, ExitReport(exit_code=3, finished_at=time.time()).to_json())
            self.finished = True
        return super().exit_report(paths)


def running_container(root: Path) -> ContainerPaths:
    paths = ContainerPaths(root / "containers" / "c1")
    paths.meta.mkdir(parents=True)
    writer = EventWriter(paths.events, 1)
    for state in ("ASSIGNED", "STARTING", "RUNNING"):
        writer.write_state(state)
    writer.write_logs([LogLine("stdout", "working")])
    writer.close()
    record = ContainerRecord("c1", "a1", ["0"], created_at=time.time(), state=ContainerState.RUNNING)
    record.shim_pid, record.shim_start_ticks = 999_999, 1
    record.save(paths.state)
    return paths


def manager(root: Path, runtime: ProcessRuntime, outbox: Outbox) -> ContainerManager:
    preparer = Preparer(agent_id="x", slots=[], fetch_context=lambda _a: iter(()), base_env={})
    return ContainerManager(
        containers_dir=root / "containers",
        agent_id="x",
        runtime=runtime,
        outbox=outbox,
        preparer=preparer,
        master=MasterFacts("127.0.0.1:1"),
    )


def test_the_final_event_follows_lines_written_just_before_the_exit(tmp_path: Path) -> None:
    paths = running_container(tmp_path)
    outbox = Outbox()
    runtime = FinishingShim(paths, next_seq=5)
    agents = manager(tmp_path, runtime, outbox)
    agents.restore()
    for _ in range(3):
        agents.tick()
    events = [e for e, _ in EventTailer(paths.events).read(100)]
    assert [e.seq for e in events] == [1, 2, 3, 4, 5, 6, 7]
    final = events[-1]
    assert isinstance(final, StateEvent)
    assert (final.state, final.exit_code, final.failure) == ("TERMINATED", 3, "CONTAINER_FAILED")
    record = ContainerRecord.load(paths.state)
    assert record is not None and record.final_seq == 7 and record.failure == FailureType.CONTAINER_FAILED


def test_a_vanished_supervisor_ends_the_container_as_agent_failed(tmp_path: Path) -> None:
    paths = running_container(tmp_path)
    outbox = Outbox()
    agents = manager(tmp_path, ProcessRuntime(), outbox)
    agents.restore()  # looks at the container once: its shim is gone
    [report] = agents.hello_containers()
    assert (report.state, report.exit_code) == ("TERMINATED", None)
    agents.tick()
    sent = outbox.take(max_deliveries=100)
    last = sent[-1].events[-1]
    assert isinstance(last, StateEvent)
    assert (last.state, last.failure, last.exit_code) == ("TERMINATED", "AGENT_FAILED", None)
    assert "supervisor" in last.message
    # Acknowledged: retired, no longer reported.
    agents.ack({"c1": last.seq})
    agents.tick()
    assert agents.hello_containers() == []
    record = ContainerRecord.load(paths.state)
    assert record is not None and record.delivered


def test_an_agent_that_is_stopping_refuses_new_containers_and_creates_nothing(tmp_path: Path) -> None:
    mgr = manager(tmp_path, ProcessRuntime(), Outbox())
    mgr.stop_taking_work("it is shutting down (SIGTERM)")
    request = StartRequest(
        container_id="c9", allocation_id="a9", slot_ids=("0",), entrypoint=("true",), shell=False
    )

    error = mgr.start(request)

    assert mgr.stopping
    assert error == "agent x takes no new work: it is shutting down (SIGTERM)"
    assert not (tmp_path / "containers" / "c9").exists()


def test_the_agents_own_shutdown_kill_is_its_failure_not_the_codes() -> None:
    record = ContainerRecord("c1", "a1", ["0"], created_at=0.0, kill_requested_at=1.0)
    record.kill_reason, record.kill_by_agent = "killed because the agent is shutting down", True
    for code in (0, 143):
        failure, exit_code, message = classify_exit(record, ExitReport(exit_code=code), "")
        assert (failure, exit_code, message) == (FailureType.AGENT_FAILED, code, record.kill_reason)
    # The same kill asked for by the master stays a kill.
    record.kill_by_agent = False
    assert classify_exit(record, ExitReport(exit_code=143), "")[0] == FailureType.KILLED
