"""A Docker container's supervisor: `python -m services.agent.runtime.docker_shim <meta dir> [--attach]`.

The docker runtime's counterpart of shim.py, speaking the same files with the agent (protocol.py):
the agent starts one per container in a session of its own, so an agent crash or restart leaves
it (and its container) running. It:
  * creates the container from docker.json (the command and environment of launch.json), copies
    the task's files into it (the working directory with the model definition, and
    /run/determined: info files and the model's pristine copy), starts it and writes RUNNING;
  * writes every line of the container's stdout and stderr to events.jsonl, continuing the
    container's sequence numbers (line splitting and parsing as the process runtime's shim);
  * forwards SIGTERM and SIGINT to the container; on KILL_SIGNAL it reads kill.json and sends
    SIGTERM, then SIGKILL once the grace period is over;
  * when the container ends, writes its last lines, then exit.json (exit code, OOM kill), and
    removes the container.

With --attach it takes over a container whose supervisor is gone (found by its labels): it reads
the output again from the container's first line and skips, per stream, as many lines as the
event file already holds from it, so every line is written once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from cairn.agent_files import DOCKER_LABEL_CONTAINER_ID, DOCKER_LABEL_WORK_DIR, META_DIR_NAME
from services.agent.runtime.docker_engine import ContainerEnd, DockerEngine, ImageUnavailable
from services.agent.runtime.docker_spec import CONTAINER_RUN_DIR, CONTAINER_WORKDIR, ContainerSpec
from services.agent.runtime.events import EventWriter, LogEvent, LogLine, StateEvent, decode, repair_tail
from services.agent.runtime.jsonfile import read_json, write_json_atomic
from services.agent.runtime.log_lines import LineSplitter, parse_line
from services.agent.runtime.processes import start_ticks
from services.agent.runtime.protocol import (
    CONTROL_SIGNALS,
    KILL_SIGNAL,
    ContainerPaths,
    ExitReport,
    LaunchSpec,
)


def container_name(container_id: str) -> str:
    return f"cairn-{container_id}"


def find_container(engine: DockerEngine, spec: ContainerSpec) -> str | None:
    """The Docker container made for this Cairn container, by its labels."""
    found = engine.find(
        {
            DOCKER_LABEL_WORK_DIR: spec.labels[DOCKER_LABEL_WORK_DIR],
            DOCKER_LABEL_CONTAINER_ID: spec.labels[DOCKER_LABEL_CONTAINER_ID],
        }
    )
    return str(found[0]["id"]) if found else None


def written_so_far(path: Path) -> tuple[int, dict[str, int], bool]:
    """From an event file a previous supervisor wrote: (next seq, task lines per stream, RUNNING
    written). A last line cut short by its writer's death is removed first."""
    repair_tail(path)
    last_seq, lines, running = 0, {"stdout": 0, "stderr": 0}, False
    try:
        with open(path, "rb") as f:
            for raw in f:
                try:
                    event = decode(raw.rstrip(b"\n"))
                except ValueError:
                    continue
                last_seq = max(last_seq, event.seq)
                if isinstance(event, LogEvent) and event.source == "task":
                    lines[event.stdtype] = lines.get(event.stdtype, 0) + 1
                elif isinstance(event, StateEvent) and event.state == "RUNNING":
                    running = True
    except FileNotFoundError:
        pass
    return last_seq + 1, lines, running


def exit_report_of(end: ContainerEnd) -> ExitReport:
    code = end.exit_code
    if end.oom_killed:
        return ExitReport(
            exit_code=code or 137,
            signal=signal.SIGKILL,
            reason=f"the container ran out of memory and was killed (OOMKilled, exit code {code or 137})",
            finished_at=end.finished_at,
        )
    if end.error:
        return ExitReport(
            exit_code=None, error=f"the container failed: {end.error}", finished_at=end.finished_at
        )
    # Docker reports a signal's end as 128+N, as a shell does.
    sig = code - 128 if 128 < code < 128 + 65 else None
    return ExitReport(exit_code=code, signal=sig, finished_at=end.finished_at)


class DockerShim:
    def __init__(
        self, paths: ContainerPaths, launch: LaunchSpec, spec: ContainerSpec, engine: DockerEngine
    ) -> None:
        self.paths = paths
        self.launch = launch
        self.spec = spec
        self.engine = engine
        self.events: EventWriter | None = None
        self.container_id: str | None = None
        self._skip = {"stdout": 0, "stderr": 0}
        self._lock = threading.Lock()
        self._kill_deadline: float | None = None
        self._killed_hard = False
        self._ended = threading.Event()

    # -- control: signals from the agent ----------------------------------------------------------
    def _control_loop(self) -> None:
        while not self._ended.is_set():
            timeout = 0.2
            if self._kill_deadline is not None and not self._killed_hard:
                timeout = max(0.0, min(timeout, self._kill_deadline - time.monotonic()))
            info = signal.sigtimedwait(CONTROL_SIGNALS, timeout)
            with self._lock:
                if self._ended.is_set():
                    return
                if info is not None:
                    self._on_signal(signal.Signals(info.si_signo))
                if (
                    self._kill_deadline is not None
                    and not self._killed_hard
                    and time.monotonic() >= self._kill_deadline
                ):
                    self._kill_now("grace period over: sending SIGKILL")

    def _on_signal(self, sig: signal.Signals) -> None:
        assert self.container_id is not None
        if sig != KILL_SIGNAL:
            self.engine.signal(self.container_id, sig.name)
            return
        request = read_json(self.paths.kill_request) or {}
        grace = max(0.0, float(request.get("grace_seconds") or 0))
        if grace <= 0 or self._killed_hard:
            self._kill_now("kill requested: sending SIGKILL")
        elif self._kill_deadline is None:
            self._note(f"kill requested: sending SIGTERM, SIGKILL in {grace:g} s")
            self.engine.signal(self.container_id, "SIGTERM")
            self._kill_deadline = time.monotonic() + grace
        else:
            self._kill_deadline = min(self._kill_deadline, time.monotonic() + grace)

    def _kill_now(self, note: str) -> None:
        assert self.container_id is not None
        self._note(note)
        self._killed_hard = True
        self.engine.signal(self.container_id, "SIGKILL")

    def _note(self, message: str, level: str = "INFO", stdtype: str = "stdout") -> None:
        if self.events is not None:
            self.events.write_logs([LogLine(stdtype, message, level, source="agent")])

    # -- the container ----------------------------------------------------------------------------
    def run(self, attach: bool) -> int:
        write_json_atomic(self.paths.shim_info, {"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())})
        if attach:
            return self._attach()
        self.events = EventWriter(self.paths.events, self.launch.first_seq)
        if KILL_SIGNAL in signal.sigpending():
            signal.sigtimedwait({KILL_SIGNAL}, 0)
            self._finish(ExitReport(exit_code=None, aborted=True, finished_at=time.time()))
            return 0
        try:
            self._create()
            assert self.container_id is not None
            self.engine.start(self.container_id)
        except Exception as exc:
            error = str(exc) if isinstance(exc, ImageUnavailable) else f"cannot start the container: {exc}"
            self._note(error, "ERROR", "stderr")
            self._finish(ExitReport(exit_code=None, error=error, finished_at=time.time()))
            if self.container_id is not None:
                self._remove_quietly()
            return 0
        self.events.write_state("RUNNING")
        return self._supervise()

    def _create(self) -> None:
        # A container of that name left by a supervisor that died before it could start it.
        leftover = find_container(self.engine, self.spec)
        if leftover is not None:
            self.engine.remove(leftover)
        self.container_id = container_id = self.engine.create(self.spec, container_name(self.paths.root.name))
        meta = self.paths.meta
        trees = [(self.paths.root, CONTAINER_WORKDIR, lambda p: meta == p or meta in p.parents)]
        run_dir = self.paths.run_determined
        if run_dir.is_dir():
            trees.append((run_dir, CONTAINER_RUN_DIR, lambda p: False))
        self.engine.copy_in(container_id, trees, self.spec.owner())
        self.engine.add_account(container_id, self.spec)

    def _remove_quietly(self) -> None:
        """Remove a container that never ran; what remains is the agent's (or the sweep's) to remove."""
        assert self.container_id is not None
        try:
            self.engine.remove(self.container_id)
        except Exception as exc:
            print(f"docker_shim: cannot remove {self.container_id}: {exc}", file=sys.stderr)

    def _attach(self) -> int:
        next_seq, lines, running = written_so_far(self.paths.events)
        self.events = EventWriter(self.paths.events, next_seq)
        self.container_id = find_container(self.engine, self.spec)
        if self.container_id is None:
            error = "the container is gone: it was removed while its supervisor was away"
            self._note(error, "ERROR", "stderr")
            self._finish(ExitReport(exit_code=None, error=error, finished_at=time.time()))
            return 0
        self._skip = lines
        if not running:
            self.events.write_state("RUNNING")
        self._note("supervisor restarted: reattached to the running container")
        return self._supervise()

    def _supervise(self) -> int:
        assert self.container_id is not None and self.events is not None
        threading.Thread(target=self._control_loop, name="shim-control", daemon=True).start()
        splitters = {"stdout": LineSplitter(), "stderr": LineSplitter()}
        try:
            for stdtype, data in self.engine.output(self.container_id):
                self._write(splitters[stdtype].feed(data), stdtype)
        except Exception as exc:
            self._note(f"reading the container's output failed: {exc}", "WARNING", "stderr")
        for stdtype, splitter in splitters.items():
            self._write(splitter.flush(), stdtype)
        end = self.engine.wait(self.container_id)
        with self._lock:
            self._ended.set()
        self._finish(exit_report_of(end))
        self.engine.remove(self.container_id)
        return 0

    def _write(self, texts: list[str], stdtype: str) -> None:
        assert self.events is not None
        lines = []
        for text in texts:
            if self._skip.get(stdtype, 0) > 0:
                self._skip[stdtype] -= 1  # already written by the previous supervisor
                continue
            parsed = parse_line(text)
            lines.append(LogLine(stdtype, parsed.message, parsed.level, parsed.rank))
        if lines:
            self.events.write_logs(lines)

    def _finish(self, report: ExitReport) -> None:
        # Close the event file first: once exit.json exists nothing more may be appended.
        if self.events is not None:
            self.events.close()
        write_json_atomic(self.paths.exit_report, report.to_json())


def main(argv: list[str] | None = None) -> int:
    # Before any thread exists, so every thread inherits the mask (see shim.py).
    signal.pthread_sigmask(signal.SIG_BLOCK, CONTROL_SIGNALS)
    args = sys.argv[1:] if argv is None else argv
    attach = "--attach" in args
    args = [a for a in args if a != "--attach"]
    if len(args) != 1 or Path(args[0]).name != META_DIR_NAME:
        print(
            "usage: python -m services.agent.runtime.docker_shim <container dir>/.cairn-agent [--attach]",
            file=sys.stderr,
        )
        return 2
    paths = ContainerPaths(Path(args[0]).resolve().parent)
    launch, spec = read_json(paths.launch), read_json(paths.docker_spec)
    if launch is None or spec is None:
        write_json_atomic(
            paths.exit_report,
            ExitReport(
                exit_code=None, error="launch spec missing or unreadable", finished_at=time.time()
            ).to_json(),
        )
        return 1
    try:
        engine = DockerEngine()
    except Exception as exc:
        error = f"cannot reach dockerd: {exc}"
        if not attach:
            writer = EventWriter(paths.events, LaunchSpec.from_json(launch).first_seq)
            writer.write_logs([LogLine("stderr", error, "ERROR", source="agent")])
            writer.close()
            write_json_atomic(
                paths.exit_report, ExitReport(exit_code=None, error=error, finished_at=time.time()).to_json()
            )
        return 1
    return DockerShim(paths, LaunchSpec.from_json(launch), ContainerSpec.from_json(spec), engine).run(attach)


if __name__ == "__main__":
    sys.exit(main())
