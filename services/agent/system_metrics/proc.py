"""The processes of the agent's containers, read from /proc in one pass per sample.

A container's processes are found by what the runtime knows of them: the process group the shim
started the command in (the process runtime), or the PID namespace of the Docker container's first
process (the docker runtime; a container with the host's PID namespace is not told apart and is
not sampled). A process that left its group (setsid) is not counted.

CPU and block I/O are counters per process; collector.py takes their differences between two
readings. /proc/<pid>/io is readable only for the agent's own processes unless it runs as root:
where it is not, the container's I/O is reported as unknown (None), not as zero. Resident memory is
summed over the processes, so pages they share (a fork's copy-on-write pages, as PyTorch's data
loader workers have) are counted once for each.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Selector:
    """How a container's processes are recognised: by process group, or by PID namespace."""

    kind: str  # "pgid" | "pidns"
    value: int


@dataclass
class GroupReading:
    """The processes of one container at one moment."""

    # pid -> (start time in ticks, CPU time in ticks): a pid reused between readings is a new process.
    cpu_ticks: dict[int, tuple[int, int]] = field(default_factory=dict)
    # pid -> (start time, bytes read from storage, bytes written); None: not readable for some process.
    io_bytes: dict[int, tuple[int, int, int]] | None = field(default_factory=dict)
    rss_bytes: int = 0
    # A process of the group, whose network namespace's counters stand for the container's.
    any_pid: int | None = None

    @property
    def processes(self) -> int:
        return len(self.cpu_ticks)


def read_groups(selectors: set[Selector], proc: Path = Path("/proc")) -> dict[Selector, GroupReading]:
    """One reading of every selected container's processes."""
    readings = {s: GroupReading() for s in selectors}
    by_pgid = {s.value: readings[s] for s in selectors if s.kind == "pgid"}
    by_pidns = {s.value: readings[s] for s in selectors if s.kind == "pidns"}
    if not readings:
        return readings
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        stat = _stat(proc, pid)
        if stat is None:
            continue
        pgrp, start, ticks, rss_pages = stat
        reading = by_pgid.get(pgrp)
        if reading is None and by_pidns:
            reading = by_pidns.get(_pid_namespace(proc, pid) or -1)
        if reading is None:
            continue
        reading.cpu_ticks[pid] = (start, ticks)
        reading.rss_bytes += rss_pages * PAGE_SIZE
        if reading.any_pid is None:
            reading.any_pid = pid
        if reading.io_bytes is not None:
            try:
                reading.io_bytes[pid] = (start, *_io(proc, pid))
            except PermissionError:
                reading.io_bytes = None  # not the agent's to read: the container's I/O is unknown
            except (OSError, KeyError, ValueError):
                pass  # the process ended between the two reads: it did its I/O before this one
    return readings


def _read(path: str, size: int = 65536) -> bytes | None:
    """A /proc file in one read: a file object's buffering cost more than the parsing, for every
    process on the machine each sample."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def network_namespace_of(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The inode of `pid`'s network namespace: containers sharing one share its counters."""
    try:
        return os.stat(f"{proc}/{pid}/ns/net").st_ino
    except OSError:
        return None


def network_bytes(pid: int, proc: Path = Path("/proc")) -> tuple[int, int] | None:
    """(received, sent) bytes over every interface but loopback of `pid`'s network namespace."""
    data = _read(f"{proc}/{pid}/net/dev")
    if data is None:
        return None
    lines = data.decode(errors="replace").splitlines()[2:]
    received = sent = 0
    for line in lines:
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            continue
        values = counters.split()
        if len(values) >= 9:
            received += int(values[0])
            sent += int(values[8])
    return received, sent


def pid_namespace_of(pid: int, proc: Path = Path("/proc")) -> int | None:
    return _pid_namespace(proc, pid)


def _stat(proc: Path, pid: int) -> tuple[int, int, int, int] | None:
    """(process group, start time, utime + stime, resident pages) of `pid`."""
    data = _read(f"{proc}/{pid}/stat", 1024)
    if data is None:
        return None
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return int(fields[2]), int(fields[19]), int(fields[11]) + int(fields[12]), int(fields[21])
    except (IndexError, ValueError):
        return None


def _io(proc: Path, pid: int) -> tuple[int, int]:
    """(bytes read from storage, bytes written) by `pid`. Raises PermissionError where the agent may
    not read them, another OSError (or KeyError) when the process is gone."""
    fd = os.open(f"{proc}/{pid}/io", os.O_RDONLY)
    try:
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    values = dict(line.split(": ", 1) for line in data.decode().splitlines() if ": " in line)
    return int(values["read_bytes"]), int(values["write_bytes"])


def _pid_namespace(proc: Path, pid: int) -> int | None:
    try:
        return os.stat(f"{proc}/{pid}/ns/pid").st_ino
    except OSError:
        return None
