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

The pool holds at most one standby per slot. Each start of a warm-eligible command takes a
standby of its key (warm_starts.WarmKey), waiting for one on its way or started for it, however
long its kind's imports take (the first of a kind waits for its zygote rather than importing the
same modules a second time beside it), and each launch prepares the next in the background, a
moment later (STANDBY_DELAY_S: not while the launched command starts, unless a take() asks for it
sooner); a standby of another key is discarded to make room. Closing the agent's end of a
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import structlog

from services.agent.runtime.private_mounts import Bind, in_private_namespace
from services.agent.runtime.processes import is_running, signal_process, start_ticks
from services.agent.runtime.warm_starts import WarmCommand, WarmKey, start_environment
from services.agent.runtime.zygotes import READY_SECONDS, ZygotePool, shim_signals
from services.agent.task_user import run_as_ids

log = structlog.get_logger(__name__)

# The standby's first control line: what to prepare (shim.standby reads it).
_ORDER_KEYS = ("argv", "python", "env", "cwd", "unmount")
# The longest take() waits for its standby: the kind's zygote may be importing its modules first
# (seconds with torch; a zygote that has not imported by then has failed: zygotes.READY_SECONDS).
TAKE_WAIT_S = READY_SECONDS + 10.0
# How often a waiting take() asks whether its container was stopped meanwhile.
ABORT_POLL_S = 0.25
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


@dataclass(eq=False)
class _DelayedStart:
    """A standby's start waiting out its delay: set to start it at once; cancelled to not start it."""

    start_now: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False


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
        # Woken when a standby's process has been started (or failed to start), or given back.
        self._started = threading.Condition(self._lock)
        # Standbys of each kind that prepare_soon asked for and whose start waits out the delay;
        # setting one's event starts it at once (take(), close()).
        self._delayed: dict[WarmKey, list[_DelayedStart]] = {}
        self._ready: list[Standby] = []
        # Standbys that became containers' shims; their folders go once they end.
        self._handed_over: list[Standby] = []
        # Starts on their way by kind (in their delay, waiting for their zygote, or being spawned
        # or forked), and the takes of each kind waiting for one.
        self._pending_of: Counter[WarmKey] = Counter()
        self._waiting: Counter[WarmKey] = Counter()
        self._closed = False
        self._numbers = itertools.count()
        # Folders of standbys an earlier agent process left (their shims ended with its stdin).
        shutil.rmtree(folder, ignore_errors=True)

    def take(
        self,
        key: WarmKey,
        recipe: Recipe,
        aborted: Callable[[], bool] = lambda: False,
        timeout: float = TAKE_WAIT_S,
    ) -> Standby | None:
        """A live standby of `key`, now the caller's: one ready; else one on its way (one in its
        delay is started now), however long it takes, its kind's zygote importing included; else
        one started now from `recipe`, waited for the same way. None when the pool has no room for
        one, is closed, `aborted()` says the container was stopped, or `timeout` ran out: the
        container then starts cold. Called outside the container manager's lock (it may wait for
        seconds): the first containers of a kind wait for their zygote's one import instead of
        each importing the same modules beside it (on cores that all train, CPU taken from training)."""
        deadline = time.monotonic() + timeout
        with self._started:
            self._waiting[key] += 1
        try:
            while True:
                with self._started:
                    standby = self._take_ready(key)
                    if standby is not None:
                        return standby
                    self._hurry(key)
                    remaining = deadline - time.monotonic()
                    if self._closed or remaining <= 0 or aborted():
                        return None
                    if self._pending_of[key] >= self._waiting[key]:
                        self._started.wait(min(remaining, ABORT_POLL_S))
                        continue
                # One more is wanted for this take (not under the lock: prepare_soon takes it).
                if not self.prepare_soon(key, recipe, at_once=True):
                    return None  # no room for one beside the others on their way
        finally:
            with self._started:
                self._waiting[key] -= 1
                if not self._waiting[key]:
                    del self._waiting[key]

    def _take_ready(self, key: WarmKey) -> Standby | None:
        """Under the lock: a ready standby of `key` that is still alive, out of the pool."""
        for standby in list(self._ready):
            if standby.key == key and standby.alive():
                self._ready.remove(standby)
                return standby
        return None

    def _hurry(self, key: WarmKey) -> None:
        """Under the lock: start now as many of `key`'s delayed standbys as its waiting takes lack
        (one container, one standby: the others keep their delay)."""
        unset = [d for d in self._delayed.get(key, []) if not d.start_now.is_set()]
        coming = self._pending_of[key] - len(unset)
        for delayed in unset[: max(0, self._waiting[key] - coming)]:
            delayed.start_now.set()

    def _cancel_one_nobody_waits_for(self, key: WarmKey) -> bool:
        """Under the lock: drop one start of another kind than `key` still in its delay, for whose
        kind no container waits, to make room for `key`'s (a container waits for it)."""
        for other, delayed_starts in self._delayed.items():
            if other == key or self._waiting[other]:
                continue
            for delayed in delayed_starts:
                if not delayed.start_now.is_set():
                    delayed.cancelled = True
                    delayed.start_now.set()  # its thread wakes, finds it cancelled and ends
                    self._no_longer_delayed(other, delayed)
                    self._settle(other)
                    return True
        return False

    def _settle(self, key: WarmKey) -> None:
        """Under the lock: one start of `key` is no longer on its way."""
        self._pending_of[key] -= 1
        if not self._pending_of[key]:
            del self._pending_of[key]

    def give_back(self, standby: Standby) -> None:
        """A taken standby that was not handed over (its container was stopped first) is ready for
        the next container of its kind again."""
        with self._started:
            if not self._closed and standby.alive():
                self._ready.append(standby)
                self._started.notify_all()
                return
        self._later(standby.discard)

    def hand_over(self, standby: Standby, meta_dir: Path) -> None:
        """Make a taken standby the shim of the container at `meta_dir` (Standby.hand_over). Its
        folder stays until that shim has ended: it may still be starting its interpreter there."""
        standby.hand_over(meta_dir)
        with self._lock:
            self._handed_over.append(standby)

    def prepare_soon(self, key: WarmKey, recipe: Recipe, at_once: bool = False) -> bool:
        """Start, in the background, a standby of `key` if the pool has room for it (discarding one of
        another key to make room): after the delay, or `at_once`. Whether one is on its way."""
        with self._lock:
            gone = [s for s in self._ready if not s.alive()]
            self._ready = [s for s in self._ready if s.alive()]
            ended = [s for s in self._handed_over if not s.alive()]
            self._handed_over = [s for s in self._handed_over if s.alive()]
            same = sum(1 for s in self._ready if s.key == key)
            wanted = not self._closed and same + self._pending_of.total() < self._capacity
            if not wanted and at_once and not self._closed and same < self._capacity:
                # A container waits for this one: a start nobody waits for yields its room.
                wanted = self._cancel_one_nobody_waits_for(key)
            if wanted:
                if len(self._ready) + self._pending_of.total() >= self._capacity:
                    evicted = next(s for s in self._ready if s.key != key)  # the oldest first
                    self._ready.remove(evicted)
                    gone.append(evicted)
                self._pending_of[key] += 1
                delayed = _DelayedStart()
                if at_once:
                    delayed.start_now.set()
                self._delayed.setdefault(key, []).append(delayed)
        for standby in gone:
            self._later(standby.discard)
        for standby in ended:
            shutil.rmtree(standby.folder, ignore_errors=True)
        if wanted:
            self._later(lambda: self._start_after_delay(key, recipe, delayed))
        return wanted

    def _start_after_delay(self, key: WarmKey, recipe: Recipe, delayed: _DelayedStart) -> None:
        delayed.start_now.wait(self._delay_s)
        self._start(key, recipe, delayed)

    def _no_longer_delayed(self, key: WarmKey, delayed: _DelayedStart) -> None:
        """Under the lock: this start has begun (or was cancelled)."""
        starts = self._delayed.get(key, [])
        if delayed in starts:
            starts.remove(delayed)
            if not starts:
                del self._delayed[key]

    def _start(self, key: WarmKey, recipe: Recipe, delayed: _DelayedStart) -> None:
        standby = None
        with self._lock:
            if delayed.cancelled:
                return  # another kind's container took its room (its counts are settled)
            # Begun: no longer one a take() could hurry or cancel (it is still counted on its way).
            self._no_longer_delayed(key, delayed)
        handled = False  # False while an exception this method does not expect is on its way out
        try:
            if self._closed:
                return  # closed during the delay: nothing to start (finally settles the counts)
            folder = self._folder / f"{os.getpid()}-{next(self._numbers)}"
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            order = recipe(folder)
            standby = self._forked(key, order, folder)
            if standby is None:
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
                self._settle(key)
                if handled and standby is not None and not self._closed:
                    self._ready.append(standby)
                    standby = None
                self._started.notify_all()
            if standby is not None:
                standby.discard()

    def _forked(self, key: WarmKey, order: dict[str, Any], folder: Path) -> Standby | None:
        """A standby forked by the zygote of `key`, once it has imported its modules; None where
        that kind has none (or it failed: the kind then starts its standbys itself from now on)."""
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
        try:
            # Only then its log: a standby's log is the sign it exists (tests wait for it).
            zygote.wait_ready()
        except Exception as exc:  # whatever went wrong, this kind starts its own standbys
            if not zygote.closed:
                self._zygotes.refuse(key, str(exc))
            return None
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
            for starts in self._delayed.values():
                for delayed in starts:
                    delayed.start_now.set()  # out of their delay, to find the pool closed
            self._started.notify_all()
        for standby in ready:
            standby.discard()
        deadline = time.monotonic() + timeout
        while self._pending_of and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._zygotes is not None:
            self._zygotes.close()
