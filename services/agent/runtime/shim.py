"""A container's supervisor: `python -m services.agent.runtime.shim <container dir>/.cairn-agent`.

The agent starts one per container, in a session of its own, so the container outlives an agent
crash or restart. The shim:
  * runs the command (launch.json) in its own process group, stdin closed, in the container dir;
  * writes RUNNING, then every line of the command's stdout and stderr (see log_lines.py), to
    events.jsonl, continuing the container's sequence numbers from launch.json's first_seq;
  * forwards SIGTERM and SIGINT to the command's process group; on KILL_SIGNAL it reads kill.json
    and sends SIGTERM, then SIGKILL once the grace period is over (at once for grace 0), whether
    or not the agent is still around to insist;
  * when the command ends, kills whatever it left behind in its process group, writes its last
    lines, and then exit.json (so once exit.json exists, events.jsonl is complete).

The command also gets the kernel's parent-death signal (SIGKILL) so that even a SIGKILLed shim
does not leave it running unsupervised.

Signals are handled synchronously by one control thread (sigtimedwait) with the control signals
blocked everywhere else. The agent starts the shim with them already blocked, so a signal sent
before this interpreter is ready waits instead of killing it; a kill already waiting when the
shim is about to start the command means the command never starts (exit.json says "aborted").
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from services.agent.runtime.events import EventWriter, LogLine
from services.agent.runtime.jsonfile import read_json, write_json_atomic
from services.agent.runtime.log_lines import LineSplitter, parse_line
from services.agent.runtime.private_mounts import Bind, NamespaceBinder, bind_in_namespace
from services.agent.runtime.processes import signal_group, start_ticks
from services.agent.runtime.protocol import (
    CONTROL_SIGNALS,
    KILL_SIGNAL,
    ContainerPaths,
    ExitReport,
    LaunchSpec,
)
from services.agent.runtime.warm_starts import WarmCommand, warm_command

# After the command ends and its group is swept, how long to wait for the output readers to see
# the end of the pipes (a descendant that left the group may still hold them open).
READER_DRAIN_SECONDS = 3.0
_PR_SET_PDEATHSIG = 1


def _parent_death_signal_setter() -> Callable[[], None] | None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL), resolved in the shim so the forked child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_it() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))

    return set_it


def _child_setup(shim_pid: int) -> Callable[[], None]:
    """Runs in the forked child before exec: unblock the signals the shim keeps blocked, and ask for
    SIGKILL if the shim dies."""
    set_parent_death_signal = _parent_death_signal_setter()

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, CONTROL_SIGNALS)
        if set_parent_death_signal is not None:
            set_parent_death_signal()
            if os.getppid() != shim_pid:
                os._exit(137)  # the shim died before we could ask to follow it

    return setup


class AdoptedChild:
    """A child process this shim got rather than started: the interpreter of a standby forked by a
    zygote (zygote.py), which made it before exec'ing this shim, so it is this process's child all
    the same. As much of subprocess.Popen as the shim uses: pid, the three pipes, poll and wait."""

    def __init__(self, pid: int, stdin: int, stdout: int, stderr: int) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = os.fdopen(stdin, "wb", buffering=0)
        self.stdout: IO[bytes] | None = os.fdopen(stdout, "rb", buffering=0)
        self.stderr: IO[bytes] | None = os.fdopen(stderr, "rb", buffering=0)
        for fd in (stdin, stdout, stderr):
            os.set_inheritable(fd, False)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid != 0:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


# What the shim supervises: a command it started, or a forked standby's interpreter.
Child = subprocess.Popen[bytes] | AdoptedChild


class Shim:
    def __init__(
        self, paths: ContainerPaths, spec: LaunchSpec, prepared: PreparedInterpreter | None = None
    ) -> None:
        self.paths = paths
        self.spec = spec
        # A standby shim's interpreter, ready to become the command (warm start).
        self._prepared = prepared
        self.events = EventWriter(paths.events, spec.first_seq)
        # Orders signalling the command against reaping it (after which its pid may be reused).
        self._lock = threading.Lock()
        self._child: Child | None = None
        self._kill_deadline: float | None = None
        self._killed_hard = False
        self._ended = threading.Event()

    # -- control: signals from the agent ------------------------------------------------------
    def _control_loop(self) -> None:
        while not self._ended.is_set():
            timeout = 0.2
            if self._kill_deadline is not None and not self._killed_hard:
                timeout = max(0.0, min(timeout, self._kill_deadline - time.monotonic()))
            info = signal.sigtimedwait(CONTROL_SIGNALS, timeout)
            if info is not None:
                self._on_signal(signal.Signals(info.si_signo))
            with self._lock:
                if (
                    self._child is not None
                    and not self._ended.is_set()
                    and self._kill_deadline is not None
                    and not self._killed_hard
                    and time.monotonic() >= self._kill_deadline
                ):
                    self._note("grace period over: sending SIGKILL")
                    self._killed_hard = True
                    signal_group(self._child.pid, signal.SIGKILL)

    def _on_signal(self, sig: signal.Signals) -> None:
        with self._lock:
            if self._child is None or self._ended.is_set():
                return  # the command is reaped; its pid may already be someone else's
            if sig == KILL_SIGNAL:
                self._on_kill_request(self._child.pid)
            else:
                signal_group(self._child.pid, sig)

    def _on_kill_request(self, pgid: int) -> None:
        request = read_json(self.paths.kill_request) or {}
        grace = max(0.0, float(request.get("grace_seconds") or 0))
        deadline = time.monotonic() + grace
        if grace <= 0 or self._killed_hard:
            self._note("kill requested: sending SIGKILL")
            self._killed_hard = True
            signal_group(pgid, signal.SIGKILL)
            return
        if self._kill_deadline is None:
            self._note(f"kill requested: sending SIGTERM, SIGKILL in {grace:g} s")
            signal_group(pgid, signal.SIGTERM)
            self._kill_deadline = deadline
        elif deadline < self._kill_deadline:
            self._kill_deadline = deadline

    def _note(self, message: str) -> None:
        self.events.write_logs([LogLine("stdout", message, "INFO", source="agent")])

    # -- running the command -------------------------------------------------------------------
    def run(self) -> int:
        write_json_atomic(self.paths.shim_info, {"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())})
        # Signals sent so far are pending (blocked). A kill means the command must not start at all;
        # SIGTERM/SIGINT stay pending for the control thread, which starts once the command runs.
        if KILL_SIGNAL in signal.sigpending():
            signal.sigtimedwait({KILL_SIGNAL}, 0)
            if self._prepared is not None:
                self._prepared.discard()
            self._finish(ExitReport(exit_code=None, aborted=True, finished_at=time.time()))
            return 0
        try:
            child = self._warm_start() or self._cold_start()
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            command = self.spec.argv[0] if self.spec.argv else "(empty command)"
            error = f"cannot start {command!r}: {reason}"
            self.events.write_logs([LogLine("stderr", error, "ERROR", source="agent")])
            self._finish(ExitReport(exit_code=None, error=error, finished_at=time.time()))
            return 0
        self._child = child
        write_json_atomic(self.paths.child_info, {"pid": child.pid, "pgid": child.pid})
        self.events.write_state("RUNNING")
        threading.Thread(target=self._control_loop, name="shim-control", daemon=True).start()
        assert child.stdout is not None and child.stderr is not None
        readers = [
            threading.Thread(target=self._pump, args=(child.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._pump, args=(child.stderr, "stderr"), daemon=True),
        ]
        for reader in readers:
            reader.start()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        # The command is gone but not yet reaped, so its pgid cannot be reused: sweep the group.
        with self._lock:
            signal_group(child.pid, signal.SIGKILL)
            returncode = child.wait()
            self._ended.set()
        deadline = time.monotonic() + READER_DRAIN_SECONDS
        for reader in readers:
            reader.join(max(0.0, deadline - time.monotonic()))
        if returncode < 0:
            report = ExitReport(exit_code=128 - returncode, signal=-returncode, finished_at=time.time())
        else:
            report = ExitReport(exit_code=returncode, finished_at=time.time())
        self._finish(report)
        return 0

    def _cold_start(self) -> Child:
        # No other thread exists yet, so preexec_fn cannot deadlock on a lock held elsewhere.
        return subprocess.Popen(
            self.spec.argv,
            cwd=self.spec.cwd,
            env=self.spec.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
            close_fds=True,
            preexec_fn=_child_setup(os.getpid()),  # noqa: PLW1509
        )

    def _warm_start(self) -> Child | None:
        """The prepared interpreter, told to become the command; None (it is discarded) when it
        cannot: the command is not its kind of python run, or it died meanwhile."""
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            return None
        command = warm_command(self.spec.argv, self.spec.env)
        if command is None or command.run.python != prepared.python:
            prepared.discard()
            return None
        try:
            child = prepared.assign(command, self.spec.env, self.spec.cwd)
        except (OSError, subprocess.SubprocessError) as exc:
            self._note(f"warm start failed ({exc}): starting the command cold")
            prepared.discard()
            return None
        self._note("warm start: the command runs in an interpreter prepared with its modules imported")
        return child

    def _pump(self, stream: IO[bytes], stdtype: str) -> None:
        splitter = LineSplitter()
        fd = stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self._write(splitter.feed(chunk), stdtype)
        self._write(splitter.flush(), stdtype)

    def _write(self, texts: list[str], stdtype: str) -> None:
        if not texts:
            return
        lines = []
        for text in texts:
            parsed = parse_line(text)
            lines.append(LogLine(stdtype, parsed.message, parsed.level, parsed.rank))
        self.events.write_logs(lines)

    def _finish(self, report: ExitReport) -> None:
        # Close the event file first: once exit.json exists nothing more may be appended.
        self.events.close()
        write_json_atomic(self.paths.exit_report, report.to_json())


# How long a hand-over waits for a just-started standby's interpreter to be running (else: cold).
PYTHON_WAIT_SECONDS = 5.0


class PreparedInterpreter:
    """A standby shim's child: a task-environment interpreter that imported the modules it was
    given and waits on its stdin for the command to become (warm_interpreter.py). It is started
    exactly as a cold command is (own process group, parent-death signal; as the task user and in
    a mount namespace of its own where the command would be), so once assigned it is supervised,
    signalled and killed as any command."""

    def __init__(self, child: Child, python: str, unmount: list[str]) -> None:
        self.python = python
        # What stands in the namespace for the container's binds until the hand-over (its /tmp).
        self._unmount = unmount
        self._child = child
        # A child already in the interpreter's namespace, waiting for the container's binds.
        self._binder: NamespaceBinder | None = None

    @classmethod
    def start(
        cls, argv: list[str], python: str, env: dict[str, str], cwd: str, unmount: list[str]
    ) -> PreparedInterpreter:
        child = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
            close_fds=True,
            preexec_fn=_child_setup(os.getpid()),  # noqa: PLW1509
        )
        return cls(child, python, unmount)

    def enter_namespace_ahead(self) -> None:
        """While the standby waits for its container: once the interpreter is itself (its namespace
        final), a child enters that namespace to make the container's binds when they come (off
        the container's start: private_mounts.NamespaceBinder). Without a namespace of its own, or
        should this fail, `assign` binds as it did before, or refuses as it did before."""
        if not self._unmount or self._binder is not None:
            # Only a standby with a private /tmp of its own is known to have a namespace of its own;
            # any other binds the way it always did, at the hand-over.
            return
        try:
            self._wait_until_python()
            self._binder = NamespaceBinder(self._child.pid)
        except OSError:
            self._binder = None

    def assign(self, command: WarmCommand, env: dict[str, str], cwd: str) -> Child:
        """Bind the container's folders in the interpreter's namespace, then hand it the command.
        OSError when it cannot be done (the caller starts the command cold, and discards this)."""
        assert self._child.stdin is not None
        if self._child.poll() is not None:
            self._drop_binder()
            raise OSError(f"the prepared interpreter had exited (status {self._child.returncode})")
        if command.binds or self._unmount:
            try:
                self._bind(command.binds)
            except OSError as exc:
                raise OSError(f"cannot bind the container's folders: {exc}") from exc
        self._child.stdin.write(json.dumps(command.run.assignment(env, cwd)).encode() + b"\n")
        self._child.stdin.close()
        return self._child

    def _wait_until_python(self, timeout: float = PYTHON_WAIT_SECONDS) -> None:
        """Wait until the child is the interpreter itself: before that it is still `unshare` or
        the shell that makes the standby's own binds, and binding now would come before those
        (a standby taken moments after it was started: another slot's hand-over) or, before the
        unshare, into the agent's own namespace. OSError when it does not get there in time."""
        python = os.path.realpath(self.python)
        deadline = time.monotonic() + timeout
        while True:
            if self._child.poll() is not None:
                raise OSError(f"the prepared interpreter had exited (status {self._child.returncode})")
            try:
                if os.readlink(f"/proc/{self._child.pid}/exe") == python:
                    return
            except OSError:
                pass  # between two execs
            if time.monotonic() >= deadline:
                raise OSError(f"the prepared interpreter did not start within {timeout:g} s")
            time.sleep(0.002)

    def _bind(self, binds: Sequence[Bind]) -> None:
        """Through the child that entered the namespace ahead, if the interpreter is still in that
        namespace; else as at the hand-over, in the one it is in now."""
        binder, self._binder = self._binder, None
        if binder is not None and binder.still_current():
            binder.bind(binds, self._unmount)  # it ends its child, whatever happens
            return
        if binder is not None:
            binder.discard()
        self._wait_until_python()
        bind_in_namespace(self._child.pid, binds, self._unmount)

    def _drop_binder(self) -> None:
        if self._binder is not None:
            self._binder.discard()
            self._binder = None

    def discard(self) -> None:
        self._drop_binder()
        if self._child.returncode is None:
            # Not once it is reaped (a poll saw it end): its pid, and so its group, may be another's.
            signal_group(self._child.pid, signal.SIGKILL)
        self._child.wait()


def standby(control: IO[bytes]) -> int:
    """`shim --standby`: prepare an interpreter (first line of `control`: standbys.standby_order),
    wait for the container to supervise (second line: its bookkeeping folder, launch.json
    written), then supervise it as `shim <folder>` would. End of input first: discard and exit."""
    first = control.readline()
    if not first:
        return 0
    order = json.loads(first)
    prepared = PreparedInterpreter.start(
        [str(a) for a in order["argv"]],
        str(order["python"]),
        {str(k): str(v) for k, v in order["env"].items()},
        str(order["cwd"]),
        [str(t) for t in order["unmount"]],
    )
    return await_container(control, prepared)


def forked_standby(control: IO[bytes], adopted_json: str) -> int:
    """`shim --standby-forked ADOPTED`: a standby a zygote made (zygote.py), its interpreter already
    this process's child and set up (ADOPTED: its pid, pipes, python and what to unmount); then as
    `shim --standby` after its first line."""
    adopted = json.loads(adopted_json)
    child = AdoptedChild(
        int(adopted["pid"]), int(adopted["stdin"]), int(adopted["stdout"]), int(adopted["stderr"])
    )
    prepared = PreparedInterpreter(child, str(adopted["python"]), [str(t) for t in adopted["unmount"]])
    return await_container(control, prepared)


def await_container(control: IO[bytes], prepared: PreparedInterpreter) -> int:
    """Wait for the container to supervise (its bookkeeping folder on `control`, launch.json
    written), then supervise it; end of input: discard the interpreter and exit."""
    prepared.enter_namespace_ahead()
    second = control.readline()
    if not second.strip():
        prepared.discard()
        return 0
    paths = ContainerPaths(Path(json.loads(second)["meta"]).resolve().parent)
    # From here on this is the container's supervisor: its own diagnostics go where a cold shim's do.
    log = os.open(paths.shim_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(paths.root)
    return supervise(paths, prepared)


def supervise(paths: ContainerPaths, prepared: PreparedInterpreter | None = None) -> int:
    data = read_json(paths.launch)
    if data is None:
        if prepared is not None:
            prepared.discard()
        print(f"shim: no readable launch spec at {paths.launch}", file=sys.stderr)
        write_json_atomic(
            paths.exit_report,
            ExitReport(
                exit_code=None, error="launch spec missing or unreadable", finished_at=time.time()
            ).to_json(),
        )
        return 1
    return Shim(paths, LaunchSpec.from_json(data), prepared).run()


def main(argv: list[str] | None = None) -> int:
    # Before any thread exists, so every thread inherits the mask (see the module docstring).
    signal.pthread_sigmask(signal.SIG_BLOCK, CONTROL_SIGNALS)
    args = sys.argv[1:] if argv is None else argv
    if args == ["--standby"]:
        return standby(sys.stdin.buffer)
    if len(args) == 2 and args[0] == "--standby-forked":
        return forked_standby(sys.stdin.buffer, args[1])
    if len(args) != 1:
        print(
            "usage: python -m services.agent.runtime.shim <container dir>/.cairn-agent | --standby"
            " | --standby-forked ADOPTED",
            file=sys.stderr,
        )
        return 2
    return supervise(ContainerPaths(Path(args[0]).resolve().parent))


if __name__ == "__main__":
    status = main()
    # What the shim exists for is done (exit.json written, or the standby discarded): leave without
    # the interpreter's finalization, which took ~20 ms here, while the agent learns of the
    # container's end from this process's exit (its next tick, at the latest, otherwise).
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)
