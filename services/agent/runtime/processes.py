"""Checking on and signalling processes by pid without mistaking a recycled pid for ours.

A pid alone is not an identity: after an agent restart the pid recorded for a container may belong
to a new, unrelated process. Linux's /proc/<pid>/stat gives the process start time (in clock ticks
since boot); (pid, start time) is unique. A zombie counts as gone: it has exited, and whoever
inherited it may simply not have reaped it yet.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Callable
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or ")".
    return raw[raw.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time, or None when there is no such process (or no /proc)."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[19])  # field 22 of stat; `fields` begins at field 3 (state)


def is_running(pid: int, expected_start: int | None = None) -> bool:
    """True while `pid` is a live (not zombie) process, and the same one when `expected_start` is
    given."""
    if pid <= 0:
        return False
    fields = _stat_fields(pid)
    if fields is None:
        if Path("/proc/self/stat").exists():
            return False
        # Without /proc (not Linux) fall back to existence alone.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields[0] in ("Z", "X"):
        return False
    return expected_start is None or int(fields[19]) == expected_start


def signal_process(pid: int, sig: signal.Signals) -> bool:
    """Send `sig` to `pid`; False when it is already gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send `sig` to every process of group `pgid`; False when the group is empty."""
    if pgid <= 1:
        return False  # never the agent's own or init's group by mistake
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def watch_pid_exit(pid: int, expected_start: int | None, on_exit: Callable[[], None], name: str) -> bool:
    """Call `on_exit` (from a thread of its own) when process `pid`, started at `expected_start`,
    ends, though it is not this process's child: through a pidfd (Linux 5.3), which stays bound
    to that process even if its pid is reused. False, and nothing watched, where there is none
    (the caller's polling finds the end instead)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return False
    # Checked after the pidfd is open: if that pid is still the process started then, so is the pidfd's.
    if not is_running(pid, expected_start):
        os.close(pidfd)
        on_exit()
        return True

    def wait() -> None:
        try:
            select.select([pidfd], [], [])
        finally:
            os.close(pidfd)
        on_exit()

    threading.Thread(target=wait, name=name, daemon=True).start()
    return True
