"""Warm starts, the agent's part: standby supervisors, each with a prepared interpreter, kept ready
for the next container of the same kind.

A standby is `python -m services.agent.runtime.shim --standby`, started like any container's shim
(own session, control signals blocked, the shim's environment) but before there is a container:
it starts a task-environment interpreter that imports the Core API and the experiment's
`environment.preload_modules` (shim.PreparedInterpreter) and waits. Handing it a container (its
launch.json written, its folder on the standby's stdin) makes it that container's shim, with the
interpreter becoming the command; from then on nothing tells it from a cold shim: same files,
same signals, same kill and reattach paths. Where its kind may have a zygote (zygotes.py), the
standby is forked by that zygote instead (`shim --standby-forked`): the imports are done once.

The pool holds at most one standby per slot. Each launch of a warm-eligible command takes a
standby of its key (warm_starts.WarmKey) if there is one and prepares the next in the background,
a moment later (STANDBY_DELAY_S: not while the launched command starts, unless a take() asks for
it sooner); a standby of another key is discarded to make room. Closing the agent's end of a
standby's stdin (agent stop, or the agent dying) makes an unused standby discard its interpreter
and exit.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import structlog

from services.agent.containers.private_mounts import Bind, in_private_namespace
from services.agent.runtime.processes import is_running, signal_process, start_ticks
from services.agent.runtime.warm_starts import WarmCommand, WarmKey, start_environment
from services.agent.runtime.zygotes import ZygotePool, shim_signals
from services.agent.task_user import run_as_ids

log = structlog.get_logger(__name__)

# The standby's first control line: what to prepare (shim.standby reads it).
_ORDER_KEYS = ("argv", "python", "env", "cwd", "unmount")
# The longest take() waits for a standby of its kind whose process is being started (a spawn or a
# zygote's fork: milliseconds; the bound is for a machine too busy to give them).
SPAWN_WAIT_S = 5.0
# How long after a launch the next standby of its kind is started. Starting one (a shim's
# interpreter, a zygote's fork and its copy-on-write faults) costs tens of milliseconds of CPU,
# which, begun at the launch, came out of the launched command's own start on a busy machine: on
# 2 cores, 1 s trials went from their predecessor's close to their first line in 37 ms with the
# standby started later against 55 ms at once. A take() of that kind before then starts it at once.
STANDBY_DELAY_S = 0.2
_WARM_INTERPRETER = Path(__file__).with_name("warm_interpreter.py")


@dataclass
class Standby:
    key: WarmKey
    pid: int
    folder: Path
    # The write end of the standby's control pipe (its stdin).
    stdin: IO[bytes]
    # Present when this agent started the shim itself (it reaps it); a zygote's fork is the
    # zygote's child, known by pid and start time.
    popen: subprocess.Popen[bytes] | None = None
    start_ticks: int | None = None

    @classmethod
    def started(cls, key: WarmKey, popen: subprocess.Popen[bytes], folder: Path) -> Standby:
        assert popen.stdin is not None
        return cls(key, popen.pid, folder, popen.stdin, popen, start_ticks(popen.pid))

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return is_running(self.pid, self.start_ticks)

    def hand_over(self, meta_dir: Path) -> None:
        """Make it the shim of the container whose bookkeeping folder is `meta_dir` (launch.json
        already written). Raises OSError when the standby is gone."""
        self.stdin.write(json.dumps({"meta": str(meta_dir)}).encode() + b"\n")
        self.stdin.close()

    def discard(self) -> None:
        """End of input: the standby discards its interpreter and exits."""
        try:
            self.stdin.close()
        except OSError:
            pass
        if self.popen is not None:
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        else:
            deadline = time.monotonic() + 5
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            if self.alive():
                signal_process(self.pid, signal.SIGKILL)
        shutil.rmtree(self.folder, ignore_errors=True)


# Starts a shim process: (argv extra, cwd, stdout/stderr file) -> Popen with stdin a pipe.
ShimStarter = Callable[[Sequence[str], Path, Path], "subprocess.Popen[bytes]"]
# The shim's command line with these arguments and its environment: (argv, env).
ShimInvocation = Callable[[Sequence[str]], tuple[list[str], dict[str, str]]]
# Given a new standby's folder, what it is to prepare (a standby_order).
Recipe = Callable[[Path], dict[str, Any]]


def standby_order(
    folder: Path, command: WarmCommand, modules: Sequence[str], env: Mapping[str, str], cwd: str
) -> dict[str, Any]:
    """What a standby prepares for commands like `command` (whose container's env and cwd are
    `env`, `cwd`): its interpreter with `modules` imported, wrapped as the runtime wraps the
    command: as the task user, and in a mount namespace of its own where the command has one. The
    container's binds come at the hand-over; meanwhile a private /tmp of the standby's own stands
    in for the container's (unmounted at the hand-over)."""
    argv = [*command.run_as, command.run.python, "-c", _WARM_INTERPRETER.read_text(), *modules]
    home = str(folder)
    unmount: list[str] = []
    binds: list[Bind] = []
    if command.binds:
        if any(bind.target == "/tmp" for bind in command.binds):
            tmp = folder / "tmp"
            tmp.mkdir(mode=0o700)
            ids = run_as_ids(command.run_as)
            if ids is not None:
                os.chown(tmp, *ids)
            binds.append(Bind(tmp, "/tmp"))
            unmount.append("/tmp")
            home = "/tmp"  # the task user's, writable, as its own folder would be
        argv = in_private_namespace(argv, binds)
    return {
        "argv": argv,
        "python": command.run.python,
        "env": start_environment(env, cwd, home),
        "cwd": str(folder),
        "unmount": unmount,
        # The same, taken apart, for a zygote that forks the interpreter instead (zygote.py).
        "modules": list(modules),
        "binds": [[str(bind.source), bind.target] for bind in binds] if command.binds else None,
        "ids": run_as_ids(command.run_as),
    }


class StandbyPool:
    def __init__(
        self,
        folder: Path,
        capacity: int,
        start_shim: ShimStarter,
        shim_invocation: ShimInvocation | None = None,
        zygotes: ZygotePool | None = None,
        delay_s: float = STANDBY_DELAY_S,
    ) -> None:
        self._folder = folder
        self._delay_s = delay_s
        self._capacity = max(1, capacity)
        self._start_shim = start_shim
        # Standbys forked by their kind's zygote (zygotes.py) where it may have one; else started.
        self._shim_invocation = shim_invocation
        self._zygotes = zygotes
        self._lock = threading.Lock()
        # Woken when a standby's process has been started (or failed to start).
        self._started = threading.Condition(self._lock)
        # Standbys of each kind whose process is being started now (milliseconds: its log exists
        # from that moment, and take() waits for them rather than letting a container start cold).
        self._spawning: Counter[WarmKey] = Counter()
        # Standbys of each kind that prepare_soon asked for and whose start waits out the delay;
        # setting one's event starts it at once (take(), close()).
        self._delayed: dict[WarmKey, list[threading.Event]] = {}
        self._ready: list[Standby] = []
        # Standbys that became containers' shims; their folders go once they end.
        self._handed_over: list[Standby] = []
        self._pending = 0
        self._closed = False
        self._numbers = itertools.count()
        # Folders of standbys an earlier agent process left (their shims ended with its stdin).
        shutil.rmtree(folder, ignore_errors=True)

    def take(self, key: WarmKey) -> Standby | None:
        """A live standby of `key`, now the caller's; None when there is none. One of `key` whose
        start waits out its delay is started now, and one whose process is being started is waited
        for (at most SPAWN_WAIT_S in all); not one whose zygote is still importing (the caller
        holds the container manager's lock: its container starts cold instead)."""
        deadline = time.monotonic() + SPAWN_WAIT_S
        with self._started:
            while True:
                for standby in list(self._ready):
                    if standby.key == key and standby.alive():
                        self._ready.remove(standby)
                        return standby
                delayed = self._delayed.get(key, [])
                if delayed and not any(start_now.is_set() for start_now in delayed):
                    delayed[0].set()  # one container, one standby: the others keep their delay
                remaining = deadline - time.monotonic()
                if self._closed or not (self._spawning[key] or delayed) or remaining <= 0:
                    return None
                self._started.wait(remaining)

    def hand_over(self, standby: Standby, meta_dir: Path) -> None:
        """Make a taken standby the shim of the container at `meta_dir` (Standby.hand_over). Its
        folder stays until that shim has ended: it may still be starting its interpreter there."""
        standby.hand_over(meta_dir)
        with self._lock:
            self._handed_over.append(standby)

    def prepare_soon(self, key: WarmKey, recipe: Recipe) -> None:
        """Start, in the background, a standby of `key` if the pool has room for it (discarding one of
        another key to make room)."""
        with self._lock:
            gone = [s for s in self._ready if not s.alive()]
            self._ready = [s for s in self._ready if s.alive()]
            ended = [s for s in self._handed_over if not s.alive()]
            self._handed_over = [s for s in self._handed_over if s.alive()]
            same = sum(1 for s in self._ready if s.key == key)
            wanted = not self._closed and same + self._pending < self._capacity
            if wanted and len(self._ready) + self._pending >= self._capacity:
                evicted = next(s for s in self._ready if s.key != key)  # the oldest first
                self._ready.remove(evicted)
                gone.append(evicted)
            if wanted:
                self._pending += 1
                start_now = threading.Event()
                self._delayed.setdefault(key, []).append(start_now)
        for standby in gone:
            self._later(standby.discard)
        for standby in ended:
            shutil.rmtree(standby.folder, ignore_errors=True)
        if wanted:
            self._later(lambda: self._start_after_delay(key, recipe, start_now))

    def _start_after_delay(self, key: WarmKey, recipe: Recipe, start_now: threading.Event) -> None:
        start_now.wait(self._delay_s)
        self._start(key, recipe, start_now)

    def _no_longer_delayed(self, key: WarmKey, start_now: threading.Event) -> None:
        """Under the lock: this start has begun (or ended without a process)."""
        delayed = self._delayed.get(key, [])
        if start_now in delayed:
            delayed.remove(start_now)
            if not delayed:
                del self._delayed[key]

    def _start(self, key: WarmKey, recipe: Recipe, start_now: threading.Event) -> None:
        standby = None
        spawning = False

        def spawning_now() -> None:
            # From here until the end of _start a standby of `key` is about to be ready: take()
            # waits for it. Its log is made from here on. Until here a take() waited for it as a
            # delayed start (at once, in the same hold of the lock, so none sees neither).
            nonlocal spawning
            if not spawning:
                with self._lock:
                    self._spawning[key] += 1
                    self._no_longer_delayed(key, start_now)
                spawning = True

        def not_soon() -> None:
            # It waits for its zygote's imports (seconds): a take() must not wait for that (it holds
            # the container manager's lock) and starts its container cold, as without the delay.
            with self._started:
                self._no_longer_delayed(key, start_now)
                self._started.notify_all()

        handled = False  # False while an exception this method does not expect is on its way out
        try:
            if self._closed:
                return  # closed during the delay: nothing to start (finally settles the counts)
            folder = self._folder / f"{os.getpid()}-{next(self._numbers)}"
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            order = recipe(folder)
            standby = self._forked(key, order, folder, spawning_now, not_soon)
            if standby is None:
                spawning_now()
                popen = self._start_shim(("--standby",), folder, folder / "standby.log")
                standby = Standby.started(key, popen, folder)
                assert popen.stdin is not None and set(_ORDER_KEYS) <= set(order)
                popen.stdin.write(json.dumps(order).encode() + b"\n")
                popen.stdin.flush()
            handled = True
        except OSError as exc:
            log.warning("cannot prepare a standby interpreter", error=str(exc), python=key.python)
            handled = True
            if standby is not None:
                standby.discard()
            standby = None
        finally:
            # Whatever happened, this start is over: a take() waiting for it goes on.
            with self._started:
                self._pending -= 1
                self._no_longer_delayed(key, start_now)
                if spawning:
                    self._spawning[key] -= 1
                if handled and standby is not None and not self._closed:
                    self._ready.append(standby)
                    standby = None
                self._started.notify_all()
            if standby is not None:
                standby.discard()

    def _forked(
        self,
        key: WarmKey,
        order: dict[str, Any],
        folder: Path,
        spawning_now: Callable[[], None],
        not_soon: Callable[[], None],
    ) -> Standby | None:
        """A standby forked by the zygote of `key`; None where that kind has none (or it failed:
        the kind then starts its standbys itself from now on). `spawning_now` is called once the
        zygote is ready, as the fork begins; `not_soon` before waiting for a zygote not yet ready."""
        if self._zygotes is None or self._shim_invocation is None:
            return None
        private_tmp = any(target == "/tmp" for _, target in order["binds"] or ())
        zygote = self._zygotes.get(
            key, order["python"], order["modules"], order["env"], order["ids"], private_tmp
        )
        if zygote is None:
            return None
        argv, env = self._shim_invocation(["--standby-forked"])
        request = {
            "python": order["python"],
            "binds": order["binds"],
            "ids": order["ids"],
            "env": order["env"],
            "cwd": order["cwd"],
            "unmount": order["unmount"],
            "signals": shim_signals(),
            "shim": {"argv": argv, "env": env, "cwd": str(folder)},
        }
        if not zygote.ready:
            not_soon()
        try:
            # Only then its log: a standby's log is the sign it exists (tests wait for it).
            zygote.wait_ready()
        except Exception as exc:  # whatever went wrong, this kind starts its own standbys
            if not zygote.closed:
                self._zygotes.refuse(key, str(exc))
            return None
        spawning_now()
        control_r, control_w = os.pipe()
        log_fd = os.open(folder / "standby.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            pid = zygote.fork(request, control_r, log_fd)
        except Exception as exc:  # as above; the pipe's end must not leak
            os.close(control_w)
            if not zygote.closed:
                self._zygotes.refuse(key, str(exc))
            return None
        finally:
            os.close(control_r)
            os.close(log_fd)
        return Standby(key, pid, folder, os.fdopen(control_w, "wb", buffering=0), None, start_ticks(pid))

    @staticmethod
    def _later(work: Callable[[], None]) -> None:
        # Starting or reaping a process takes milliseconds: not under the container manager's lock.
        threading.Thread(target=work, name="standby", daemon=True).start()

    def close(self, timeout: float = 5.0) -> None:
        """Discard every standby (the agent stops)."""
        with self._started:
            self._closed = True
            ready, self._ready = self._ready, []
            for waiting in self._delayed.values():
                for start_now in waiting:
                    start_now.set()  # out of their delay, to find the pool closed
            self._started.notify_all()
        for standby in ready:
            standby.discard()
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._zygotes is not None:
            self._zygotes.close()
