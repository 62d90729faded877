"""The agent's containers: the master's commands on them, their supervision, and what the agent keeps
on disk so that a restarted agent carries on.

Life of a container (states as data in states.py):
  ASSIGNED   the start command was accepted: its folder, state.json and event file exist
  STARTING   a worker thread fetches and unpacks the model definition and builds the command
  RUNNING    the supervisor (shim) started the command and wrote RUNNING to the event file
  TERMINATED the agent wrote the final event once the shim's exit.json was in and every line
             the shim wrote had been read (so the final event is the container's last)
Then, once the master has acknowledged the final event's seq (or it no longer wants the
container), the container is retired: it is no longer reported in Hello, and its folder is kept
among the last KEEP_FINISHED for debugging, older ones removed.

One monitor thread calls tick() a few times a second: it reads new events from every event file
into the outbox, notices ended or vanished supervisors, backs up overdue kills, finalizes and
retires containers. Commands come from the session thread. One lock guards it all; the slow part
of a start (fetching the model definition) runs without it.
"""

from __future__ import annotations

import re
import shutil
import signal
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from services.agent.containers.container import Container, DeviceWatch, blame_device, classify_exit
from services.agent.containers.outbox import Outbox
from services.agent.containers.preparation import Preparer, StartError
from services.agent.containers.record import ContainerRecord
from services.agent.containers.states import ContainerState, FailureType, can_move
from services.agent.containers.task_env import MasterFacts
from services.agent.requests import ContainerReport, StartRequest
from services.agent.runtime.events import EventTailer, EventWriter, LogLine, StateEvent, repair_tail
from services.agent.runtime.jsonfile import read_json
from services.agent.runtime.process_runtime import ContainerSetupError, ProcessRuntime
from services.agent.runtime.processes import watch_pid_exit
from services.agent.runtime.protocol import ContainerPaths, ExitReport, LaunchSpec
from services.common.logging import get_logger

log = get_logger(__name__)

# Finished containers whose folders are kept for debugging; older ones are removed.
KEEP_FINISHED = 5
# state.json is rewritten for acknowledgements at most this often (a restart re-reads a little more).
SAVE_INTERVAL_SECONDS = 1.0
# After a kill's grace period, how long the agent gives the shim before it SIGKILLs the command's
# process group itself, and then how long before it SIGKILLs the shim too.
KILL_BACKSTOP_SECONDS = 3.0
# How long a start handed over early waits for the slot's previous container, which said it was
# exiting, to end (the agent's --handover-wait). Past that it starts beside it (with a note in its
# log) rather than leave the slot's next work behind a process that lingers in its exit.
HANDOVER_WAIT_SECONDS = 60.0
SHIM_BACKSTOP_SECONDS = 5.0

_CONTAINER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SHUTDOWN_KILL_REASON = "killed because the agent is shutting down"
_MASTER_KILL_REASON = "killed on the master's request"


class ContainerManager:
    def __init__(
        self,
        *,
        containers_dir: Path,
        agent_id: str,
        runtime: ProcessRuntime,  # or a DockerRuntime, which is one
        outbox: Outbox,
        preparer: Preparer,
        master: MasterFacts,
        handover_wait_s: float = HANDOVER_WAIT_SECONDS,
        devices: DeviceWatch | None = None,
    ) -> None:
        self._dir = containers_dir
        self._handover_wait_s = handover_wait_s
        self._agent_id = agent_id
        self._runtime = runtime
        self._outbox = outbox
        self._preparer = preparer
        self._master = master
        # The GPU health watcher, where the agent has GPUs: a failed container's end asks it whether
        # the device was to blame.
        self._devices = devices
        self._lock = threading.RLock()
        self._containers: dict[str, Container] = {}
        # Retired containers (id → finish time) whose folders are still on disk.
        self._finished: dict[str, float] = {}
        # Set once the agent is shutting down: it starts nothing more (see start()).
        self._stopping = ""
        # Set when a supervisor process of ours exits: the monitor ticks at once rather than at
        # its next interval (its polling stays, for supervisors an earlier agent process started).
        self.activity = threading.Event()
        # Notified after every tick: starts handed over early wait on it for their predecessors.
        self._ticked = threading.Condition(self._lock)
        # Called when a container starts running (the system-metrics collector reads it at once).
        self.on_running: Callable[[], None] | None = None

    # -- boot ------------------------------------------------------------------------------------
    def restore(self) -> None:
        """Find the containers a previous agent process left running (or unreported)."""
        self._dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            for folder in sorted(self._dir.iterdir()):
                if folder.is_dir():
                    self._restore_one(ContainerPaths(folder))
        self.tick()

    def _restore_one(self, paths: ContainerPaths) -> None:
        record = ContainerRecord.load(paths.state)
        if record is None:
            log.warning("container folder without a readable state; removing it", path=str(paths.root))
            shutil.rmtree(paths.root, ignore_errors=True)
            return
        if record.delivered:
            self._finished[record.container_id] = record.finished_at or paths.state.stat().st_mtime
            return
        container = Container(paths, record, EventTailer(paths.events, record.acked_offset))
        if not record.forgotten:
            self._outbox.open(
                record.container_id, record.allocation_id, record.acked_seq, record.acked_offset
            )
        if record.state != ContainerState.TERMINATED:
            pid, ticks = record.shim_pid, record.shim_start_ticks
            if pid is None:
                # The previous agent may have died between starting the shim and saving its pid.
                info = read_json(paths.shim_info)
                if info is not None:
                    pid, ticks = int(info["pid"]), info.get("start_ticks")
                    record.shim_pid, record.shim_start_ticks = pid, ticks
            if pid is not None:
                container.shim = self._runtime.attach(pid, ticks, paths)
                if container.shim.pid != pid:
                    # The docker runtime gave a container whose supervisor was gone a new one.
                    record.shim_pid, record.shim_start_ticks = container.shim.pid, container.shim.start_ticks
                    record.save(paths.state)
            else:
                container.lost = "the agent restarted while the container was starting"
                container.exit = ExitReport(exit_code=None, finished_at=time.time())
        self._containers[record.container_id] = container
        log.info(
            "found container from a previous run",
            container_id=record.container_id,
            allocation_id=record.allocation_id,
            state=record.state.value,
        )

    # -- the session's view ----------------------------------------------------------------------
    def hello_containers(self) -> list[ContainerReport]:
        with self._lock:
            reports = []
            for c in self._containers.values():
                if c.record.forgotten:
                    continue
                state, exit_code = c.record.state, c.record.exit_code
                if state != ContainerState.TERMINATED and c.exit is not None:
                    state, exit_code = ContainerState.TERMINATED, c.exit.exit_code
                reports.append(
                    ContainerReport(
                        container_id=c.id,
                        allocation_id=c.record.allocation_id,
                        state=state.value,
                        slot_ids=tuple(c.record.slot_ids),
                        exit_code=exit_code,
                        started_at=c.record.started_at,
                    )
                )
            return reports

    def apply_welcome(self, keep: Collection[str], acked: Mapping[str, int], master: MasterFacts) -> None:
        """A new session: kill what the master no longer wants and drop what it already stored
        (the session then rewinds the outbox to send the rest again)."""
        keep_ids = set(keep)
        with self._lock:
            self._master = master
            for c in list(self._containers.values()):
                if c.record.forgotten:
                    continue
                if c.id not in keep_ids:
                    log.warning("the master does not keep this container; stopping it", container_id=c.id)
                    c.record.forgotten = True
                    self._outbox.close(c.id)
                    if c.record.state != ContainerState.TERMINATED:
                        self._kill_locked(c, 0, "the master no longer knows this container")
                    self._save(c)
                else:
                    self._ack_locked(c, acked.get(c.id, 0))

    def ack(self, acked: Mapping[str, int]) -> None:
        with self._lock:
            for container_id, seq in acked.items():
                c = self._containers.get(container_id)
                if c is not None:
                    self._ack_locked(c, seq)

    def _ack_locked(self, c: Container, seq: int) -> None:
        moved = self._outbox.ack(c.id, seq)
        if moved is not None:
            c.record.acked_seq, c.record.acked_offset = moved
            c.dirty = True

    # -- commands ----------------------------------------------------------------------------------
    def start(self, request: StartRequest) -> str | None:
        """Accept a start command; the error to acknowledge it with, or None. A container that
        cannot run is accepted and ends TERMINATED with the reason (so the master learns why)."""
        if not _CONTAINER_ID.match(request.container_id):
            return "start.container_id: required; letters, digits, '.', '_' and '-' only (at most 128)"
        if not request.allocation_id:
            return "start.allocation_id: required"
        with self._lock:
            if self._stopping:
                return f"agent {self._agent_id} takes no new work: {self._stopping}"
            known = self._containers.get(request.container_id)
            if known is not None or request.container_id in self._finished:
                if known is not None and known.record.allocation_id == request.allocation_id:
                    return None  # a replayed start: already under way
                return f"start.container_id: container {request.container_id} already exists on this agent"
            paths = ContainerPaths(self._dir / request.container_id)
            if paths.root.exists():
                return f"start.container_id: a folder for container {request.container_id} already exists"
            paths.root.mkdir(parents=True)
            # launch.json holds the task's environment, allocation token included: owner only.
            paths.meta.mkdir(mode=0o700)
            record = ContainerRecord(
                container_id=request.container_id,
                allocation_id=request.allocation_id,
                slot_ids=list(request.slot_ids),
                created_at=time.time(),
                description=request.description,
                kill_grace_seconds=max(0, request.kill_grace_seconds),
            )
            record.save(paths.state)
            container = Container(
                paths, record, EventTailer(paths.events), writer=EventWriter(paths.events, 1)
            )
            assert container.writer is not None
            container.writer.write_state(ContainerState.ASSIGNED.value)
            self._containers[request.container_id] = container
            self._outbox.open(request.container_id, request.allocation_id)
        log.info(
            "starting container",
            container_id=request.container_id,
            allocation_id=request.allocation_id,
            slots=list(request.slot_ids),
            description=request.description,
        )
        threading.Thread(
            target=self._start_worker,
            args=(container, request),
            name=f"start-{request.container_id}",
            daemon=True,
        ).start()
        return None

    def _start_worker(self, c: Container, request: StartRequest) -> None:
        try:
            try:
                self._runtime.before_start(
                    request,
                    note=lambda m, level: self._note(c, m, level),
                    pulling=lambda: self._move_under_lock(c, ContainerState.PULLING),
                )
            except ContainerSetupError as exc:
                raise StartError(FailureType.TASK_ERROR, str(exc)) from exc
            with self._lock:
                self._move_before_launch(c, ContainerState.STARTING)
                master = self._master
            problem = self._preparer.problem(request)
            if problem:
                raise StartError(FailureType.TASK_ERROR, problem)
            prepared = self._preparer.prepare(
                request,
                c.paths,
                master,
                note=lambda m, level: self._note(c, m, level),
                aborted=lambda: c.record.abort_requested,
            )
            self._wait_for_predecessors(c, request.after_container_ids)
            # Outside the lock: it may wait seconds for its kind's first imports.
            standby = self._runtime.take_standby(
                request,
                prepared.argv,
                prepared.env,
                str(prepared.cwd),
                aborted=lambda: c.record.abort_requested,
                note=lambda m, level: self._note(c, m, level),
            )
            with self._lock:
                if c.record.abort_requested:
                    if standby is not None:
                        self._runtime.give_back(standby)
                    raise StartError(FailureType.CONTAINER_ABORTED, "stopped before its command started")
                assert c.writer is not None
                spec = LaunchSpec(prepared.argv, prepared.env, str(prepared.cwd), first_seq=c.writer.next_seq)
                c.writer.close()
                c.writer = None  # from here on the shim writes the event file
                try:
                    c.shim = self._runtime.launch(c.paths, spec, request, standby)
                except ContainerSetupError as exc:
                    c.writer = EventWriter(c.paths.events, spec.first_seq)
                    raise StartError(FailureType.TASK_ERROR, str(exc)) from exc
                except OSError as exc:
                    c.writer = EventWriter(c.paths.events, spec.first_seq)
                    raise StartError(
                        FailureType.TASK_ERROR, f"cannot start the container's supervisor: {exc}"
                    ) from exc
                c.record.shim_pid, c.record.shim_start_ticks = c.shim.pid, c.shim.start_ticks
                self._save(c)
                self._watch_exit(c)
            log.info("container launched", container_id=c.id, shim_pid=c.shim.pid, argv=prepared.argv)
        except StartError as exc:
            with self._lock:
                if c.record.abort_requested:
                    # Stopped while starting: whatever else went wrong, it never ran.
                    self._end_before_launch(
                        c, FailureType.CONTAINER_ABORTED, "stopped before its command started"
                    )
                else:
                    self._end_before_launch(c, exc.failure, exc.message)
        except Exception as exc:
            log.exception("container start failed", container_id=c.id)
            with self._lock:
                self._end_before_launch(
                    c, FailureType.TASK_ERROR, f"the agent failed to start the container: {exc}"
                )

    def _wait_for_predecessors(self, c: Container, after: Sequence[str]) -> None:
        """An early hand-over: the previous containers on these slots said they are exiting, and the
        master placed this one meanwhile. Everything is prepared; the command starts once they
        have ended (their supervisors reported the exit), or after the agent's --handover-wait."""
        if not after:
            return
        deadline = time.monotonic() + self._handover_wait_s
        noted = False
        with self._lock:
            while not c.record.abort_requested:
                running = [x for x in after if self._still_running(x)]
                if not running:
                    return
                if not noted:
                    previous = ", ".join(running)
                    self._note(c, f"waiting for the slot's previous container to exit: {previous}", "INFO")
                    noted = True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    message = (
                        f"container {', '.join(running)} said it was exiting but has not ended "
                        f"{self._handover_wait_s:g} s after its slots were handed on: starting beside it"
                    )
                    log.warning("early hand-over: predecessor lingers", container_id=c.id, running=running)
                    self._note(c, message, "WARNING")
                    return
                self._ticked.wait(min(remaining, 1.0))

    def _still_running(self, container_id: str) -> bool:
        known = self._containers.get(container_id)
        return known is not None and known.record.state != ContainerState.TERMINATED and known.exit is None

    def _watch_exit(self, c: Container) -> None:
        if c.shim is None:
            return
        popen = c.shim.popen
        if popen is None:
            # Not this process's child (a standby a zygote forked): its pidfd says when it ends.
            watch_pid_exit(c.shim.pid, c.shim.start_ticks, self.activity.set, name=f"exit-{c.id}")
            return

        def wait_then_wake() -> None:
            # Popen.wait and the monitor's poll() share Popen's own reaping lock.
            popen.wait()
            self.activity.set()

        threading.Thread(target=wait_then_wake, name=f"exit-{c.id}", daemon=True).start()

    def _note(self, c: Container, message: str, level: str) -> None:
        with self._lock:
            if c.writer is not None:
                c.writer.write_logs([LogLine("stdout", message, level, source="agent")])

    def _move_under_lock(self, c: Container, state: ContainerState) -> None:
        with self._lock:
            self._move_before_launch(c, state)

    def _move_before_launch(self, c: Container, state: ContainerState) -> None:
        if not can_move(c.record.state, state):
            return
        assert c.writer is not None
        c.writer.write_state(state.value)
        c.record.state = state
        self._save(c)

    def _end_before_launch(self, c: Container, failure: FailureType, message: str) -> None:
        if c.record.state == ContainerState.TERMINATED:
            return
        if c.shim is not None:
            # Launched after all (something failed after the launch): the shim owns the event file
            # now, and supervision will see the container's end.
            log.error(
                "container launched but its start did not finish cleanly", container_id=c.id, error=message
            )
            return
        writer = c.writer or EventWriter(c.paths.events, self._next_seq(c))
        if failure == FailureType.TASK_ERROR:
            writer.write_logs([LogLine("stderr", message, "ERROR", source="agent")])
        event = writer.write_state(ContainerState.TERMINATED.value, failure=failure.value, message=message)
        writer.close()
        c.writer = None
        self._set_terminated(c, event, None, failure)
        log.info("container ended before it ran", container_id=c.id, failure=failure.value, reason=message)

    def signal(self, container_id: str, terminate: bool) -> str | None:
        """SIGTERM (terminate) or SIGINT to the command's process group, through its shim."""
        with self._lock:
            c = self._containers.get(container_id)
            if c is None:
                return (
                    None
                    if container_id in self._finished
                    else f"signal.container_id: no container {container_id}"
                )
            if c.record.state == ContainerState.TERMINATED:
                return None
            if c.shim is None:
                if terminate:
                    c.record.abort_requested = True
                    self._save(c)
                    return None
                return f"signal: container {container_id} has not started its command yet"
            self._runtime.send_signal(c.shim, signal.SIGTERM if terminate else signal.SIGINT)
            log.info(
                "signalled container", container_id=container_id, signal="SIGTERM" if terminate else "SIGINT"
            )
            return None

    def kill(self, container_id: str, grace_seconds: int, reason: str | None = None) -> str | None:
        reason = f"killed on the master's request: {reason}" if reason else _MASTER_KILL_REASON
        with self._lock:
            c = self._containers.get(container_id)
            if c is None:
                return (
                    None
                    if container_id in self._finished
                    else f"kill.container_id: no container {container_id}"
                )
            self._kill_locked(c, max(0, grace_seconds), reason)
            return None

    def _kill_locked(self, c: Container, grace: float, reason: str, by_agent: bool = False) -> None:
        if c.record.state == ContainerState.TERMINATED:
            return
        if c.exit is not None or (c.shim is not None and self._runtime.exit_report(c.paths) is not None):
            return  # it already ended on its own; its own exit is what gets reported
        if c.record.kill_requested_at is None:
            c.record.kill_requested_at = time.time()
            c.record.kill_grace = grace
            c.record.kill_reason = reason
            c.record.kill_by_agent = by_agent
        else:
            # A second kill can only hurry the first one.
            c.record.kill_grace = min(c.record.kill_grace, grace)
        if c.shim is None:
            c.record.abort_requested = True
        else:
            self._runtime.request_kill(c.shim, c.paths, grace)
        self._save(c)
        log.info("killing container", container_id=c.id, grace_seconds=grace, reason=reason)

    def stop_taking_work(self, reason: str) -> None:
        """The agent is shutting down: every start from now on is refused with `reason` (the
        session tells the master it is the agent's shutdown, so the task is placed elsewhere)."""
        with self._lock:
            self._stopping = reason

    @property
    def stopping(self) -> bool:
        with self._lock:
            return bool(self._stopping)

    def kill_all(self) -> None:
        """Kill every container (the agent is shutting down with --kill-containers-on-exit). The
        ends are the agent's doing, not the code's (see classify_exit)."""
        with self._lock:
            for c in self._containers.values():
                self._kill_locked(c, c.record.kill_grace_seconds, _SHUTDOWN_KILL_REASON, by_agent=True)

    def live_container_ids(self) -> set[str]:
        """The containers not yet ended (their runtime's resources are still theirs)."""
        with self._lock:
            return {c.id for c in self._containers.values() if c.record.state != ContainerState.TERMINATED}

    def running(self) -> list[tuple[ContainerRecord, ContainerPaths]]:
        """The containers whose command runs now (RUNNING, not ended): what system metrics sample."""
        with self._lock:
            return [
                (c.record, c.paths)
                for c in self._containers.values()
                if c.record.state == ContainerState.RUNNING and c.exit is None
            ]

    def all_terminated(self) -> bool:
        with self._lock:
            return all(c.record.state == ContainerState.TERMINATED for c in self._containers.values())

    def all_delivered(self) -> bool:
        with self._lock:
            return not self._containers

    def save_all(self) -> None:
        """Write what is not yet on disk (throttled acknowledgements), before the agent exits."""
        with self._lock:
            for c in self._containers.values():
                if c.dirty:
                    self._save(c)

    def final_events_sent(self) -> bool:
        """Every container has ended and its final event has been handed to the stream."""
        with self._lock:
            return all(
                c.record.state == ContainerState.TERMINATED
                and (
                    c.record.forgotten
                    or (
                        c.record.final_seq is not None
                        and c.record.last_seq >= c.record.final_seq
                        and not self._outbox.unsent(c.id)
                    )
                )
                for c in self._containers.values()
            )

    def longest_kill_grace(self) -> float:
        with self._lock:
            return max((c.record.kill_grace_seconds for c in self._containers.values()), default=0)

    # -- supervision ---------------------------------------------------------------------------------
    def tick(self) -> None:
        now = time.time()
        with self._lock:
            for c in list(self._containers.values()):
                try:
                    # Supervise before reading: once the shim's report is seen, the read that
                    # follows reaches the true end of the event file, which _finalize relies on.
                    self._supervise(c, now)
                    self._read_events(c)
                    if self._finalize(c, now):
                        # The final event goes out in this tick, not the next (a trial's end
                        # reaches the master, and its slot the next trial, a tick sooner).
                        self._read_events(c)
                    self._retire(c)
                    if c.dirty and now - c.saved_at >= SAVE_INTERVAL_SECONDS and c.id in self._containers:
                        self._save(c)
                except Exception:
                    log.exception("supervising a container failed", container_id=c.id)
            self._remove_old_folders()
            self._ticked.notify_all()

    def _read_events(self, c: Container) -> None:
        c.caught_up = False
        if c.record.forgotten:
            return
        room = self._outbox.room(c.id)
        if room <= 0:
            return
        items = c.tailer.read(room)
        c.caught_up = c.tailer.caught_up
        for event, _ in items:
            if (
                isinstance(event, StateEvent)
                and event.state == ContainerState.RUNNING.value
                and can_move(c.record.state, ContainerState.RUNNING)
            ):
                c.record.state = ContainerState.RUNNING
                c.record.started_at = event.time
                child = read_json(c.paths.child_info)
                if child is not None:
                    c.record.command_pgid = int(child["pgid"])
                self._save(c)
                if self.on_running is not None:
                    self.on_running()
        if items:
            c.record.last_seq = max(c.record.last_seq, c.tailer.last_seq)
            self._outbox.add(c.id, items)

    def _supervise(self, c: Container, now: float) -> None:
        if c.record.state == ContainerState.TERMINATED or c.shim is None or c.exit is not None:
            return
        report = self._runtime.exit_report(c.paths)
        if report is None and not self._runtime.is_alive(c.shim):
            report = self._runtime.exit_report(c.paths)  # it may have written one just before exiting
            if report is None:
                self._runtime.force_kill(c.shim, c.paths)
                c.lost = "the container's supervisor process died unexpectedly"
                report = ExitReport(exit_code=None, finished_at=now)
                log.warning("container supervisor vanished", container_id=c.id, shim_pid=c.shim.pid)
        if report is not None:
            c.exit = report
            if c.shim.popen is not None:
                c.shim.popen.poll()  # reap it
            return
        requested = c.record.kill_requested_at
        if requested is None:
            return
        overdue = now - (requested + c.record.kill_grace + KILL_BACKSTOP_SECONDS)
        if overdue > 0 and c.forced_steps == 0:
            log.warning("kill overdue; SIGKILLing the command's process group", container_id=c.id)
            self._runtime.kill_command_group(c.shim, c.paths)
            c.forced_steps = 1
        elif overdue > SHIM_BACKSTOP_SECONDS and c.forced_steps == 1:
            log.warning("kill still overdue; SIGKILLing the supervisor", container_id=c.id)
            self._runtime.force_kill(c.shim, c.paths)
            c.forced_steps = 2

    def _finalize(self, c: Container, now: float) -> bool:
        """Write the final event once the command's end is known and every line before it is read.
        True when it wrote it now."""
        if c.record.state == ContainerState.TERMINATED or c.exit is None:
            return False
        failure, exit_code, message = classify_exit(c.record, c.exit, c.lost)
        blamed = blame_device(c.record, c.exit.finished_at or now, failure, message, self._devices)
        if blamed is None:
            return False  # the GPU health watcher has not caught up with the end yet
        failure, message = blamed
        if c.record.forgotten:
            c.record.state = ContainerState.TERMINATED
            c.record.exit_code, c.record.failure = exit_code, failure
            c.record.finished_at = c.exit.finished_at or now
            self._save(c)
            self._preparer.ended(c.id)
            return False
        if not c.caught_up:
            return False
        if repair_tail(c.paths.events):
            log.warning("cut an incomplete last line from the event file", container_id=c.id)
        writer = EventWriter(c.paths.events, self._next_seq(c))
        if c.lost:
            writer.write_logs([LogLine("stderr", c.lost, "ERROR", source="agent")])
        event = writer.write_state(
            ContainerState.TERMINATED.value, exit_code=exit_code, failure=failure.value, message=message
        )
        writer.close()
        c.exit = ExitReport(exit_code, finished_at=c.exit.finished_at or now)
        self._set_terminated(c, event, exit_code, failure)
        if c.shim is not None and c.shim.popen is not None:
            c.shim.popen.poll()  # reap it, if it has exited since it wrote its report
        log.info(
            "container terminated",
            container_id=c.id,
            allocation_id=c.record.allocation_id,
            exit_code=exit_code,
            failure=failure.value or None,
            reason=message or None,
        )
        return True

    def _set_terminated(
        self, c: Container, event: StateEvent, exit_code: int | None, failure: FailureType
    ) -> None:
        c.record.state = ContainerState.TERMINATED
        c.record.exit_code = exit_code
        c.record.failure = failure
        c.record.final_seq = event.seq
        c.record.finished_at = event.time
        self._save(c)
        self._preparer.ended(c.id)

    def _next_seq(self, c: Container) -> int:
        return max(c.tailer.last_seq, c.record.last_seq, c.record.acked_seq) + 1

    def _retire(self, c: Container) -> None:
        if c.record.state != ContainerState.TERMINATED:
            return
        if not c.record.forgotten and (
            c.record.final_seq is None or self._outbox.acked(c.id) < c.record.final_seq
        ):
            return
        c.record.delivered = True
        self._save(c)
        self._outbox.close(c.id)
        del self._containers[c.id]
        self._finished[c.id] = c.record.finished_at or time.time()
        log.info("container retired", container_id=c.id)

    def _remove_old_folders(self) -> None:
        if len(self._finished) <= KEEP_FINISHED:
            return
        by_age = sorted(self._finished.items(), key=lambda item: item[1])
        for container_id, _ in by_age[: len(by_age) - KEEP_FINISHED]:
            shutil.rmtree(self._dir / container_id, ignore_errors=True)
            self._preparer.discard(container_id)
            del self._finished[container_id]

    def _save(self, c: Container) -> None:
        c.record.save(c.paths.state)
        c.dirty = False
        c.saved_at = time.time()
