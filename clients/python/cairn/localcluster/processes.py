"""Processes of a local cluster: each in its own session (so its whole process group can be
signalled, and a terminal's Ctrl-C does not reach it), output appended to its log file.

Liveness is judged with care because pids outlive the supervisor: a recorded pid may have been
reused (so the command line is compared where /proc exists), and a dead child may linger as a
zombie when nobody reaps it (so zombies count as dead).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_PROC = Path("/proc")
_POLL_INTERVAL_S = 0.05

# Children this process started, so they can be reaped (and their exit codes read).
_children: dict[int, subprocess.Popen[bytes]] = {}


def spawn(command: Sequence[str], log_path: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log_file:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        log_file.write(f"==== {stamp} starting: {' '.join(command)}\n".encode())
        log_file.flush()
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            close_fds=True,
        )
    _children[process.pid] = process
    log.debug("spawned pid=%s command=%s", process.pid, command)
    return process


def exit_code(pid: int) -> int | None:
    """The exit code of a child of this process that has exited, else None."""
    process = _children.get(pid)
    return None if process is None else process.poll()


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group) from /proc/<pid>/stat, None where unavailable."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[2])


def process_start_ticks(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot, /proc/<pid>/stat field 22): with the pid, an
    identity that a reused pid does not share. None where unavailable."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


def is_running(pid: int) -> bool:
    process = _children.get(pid)
    if process is not None:
        # Our own child: poll() reaps it and is the one authority, so its exit code is known once
        # this says False. /proc shows a process's main thread as a zombie while its other threads
        # are still exiting, before waitpid can reap it (a test read exit_code None after that).
        return process.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = _proc_stat(pid)
    return stat is None or stat[0] not in ("Z", "X")


def command_matches(pid: int, command: Sequence[str]) -> bool:
    """False when /proc shows `pid` running something else (the recorded process is gone and its
    pid reused). Where /proc is missing, trust the pid."""
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except FileNotFoundError:
        return not _PROC.is_dir()
    except OSError:
        return True
    actual = raw.rstrip(b"\0").split(b"\0")
    expected = [part.encode() for part in command]
    return actual[1:] == expected[1:]


def is_recorded_process_running(pid: int, command: Sequence[str]) -> bool:
    if pid in _children:
        # Our own child is ours for sure; its /proc cmdline may not show the command yet
        # (between fork and exec), so comparing it could disown a process we must stop.
        return is_running(pid)
    return is_running(pid) and command_matches(pid, command)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    if _PROC.is_dir():
        members = []
        for entry in _PROC.iterdir():
            if not entry.name.isdigit():
                continue
            stat = _proc_stat(int(entry.name))
            if stat is not None and stat[1] == pgid and stat[0] not in ("Z", "X"):
                members.append(int(entry.name))
        return members
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    return [pgid]


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """True if the signal was delivered to at least one process."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _reap(pids: Iterable[int]) -> None:
    for pid in pids:
        process = _children.get(pid)
        if process is not None:
            process.poll()


def _wait_until_gone(pids: set[int], deadline: float) -> set[int]:
    remaining = set(pids)
    while remaining and time.monotonic() < deadline:
        _reap(remaining)
        remaining = {pid for pid in remaining if is_running(pid)}
        if remaining:
            time.sleep(_POLL_INTERVAL_S)
    return remaining


@dataclass(frozen=True)
class StopOutcome:
    pid: int
    # "terminated" (exited after SIGTERM), "killed" (needed SIGKILL) or "not running".
    how: str


def stop_process_groups(pids: Sequence[int], grace_s: float) -> dict[int, StopOutcome]:
    """SIGTERM each leader (each one leads its own session/group), wait up to `grace_s`, SIGKILL
    the groups of those still running; then SIGKILL whatever is left in every group, so nothing
    a stopped service started outlives it."""
    outcomes: dict[int, StopOutcome] = {}
    running = set()
    for pid in pids:
        if is_running(pid):
            try:
                os.kill(pid, signal.SIGTERM)
                running.add(pid)
            except ProcessLookupError:
                pass
        if pid not in running:
            outcomes[pid] = StopOutcome(pid, "not running")
    stubborn = _wait_until_gone(running, time.monotonic() + grace_s)
    for pid in running:
        if pid in stubborn:
            signal_group(pid, signal.SIGKILL)
            outcomes[pid] = StopOutcome(pid, "killed")
        else:
            outcomes[pid] = StopOutcome(pid, "terminated")
    for pid in pids:
        if group_members(pid):
            signal_group(pid, signal.SIGKILL)
    leftovers = _wait_until_gone(set(pids), time.monotonic() + 5.0)
    for pid in leftovers:
        log.warning("process still running after SIGKILL pid=%s", pid)
    for pid in pids:
        process = _children.pop(pid, None)
        if process is not None:
            process.poll()
    return outcomes


def log_tail(path: Path, lines: int = 20) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return [line.rstrip("\n") for line in deque(handle, maxlen=lines)]
    except OSError:
        return []
