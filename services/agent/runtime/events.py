"""A container's event file: state changes and log lines, one JSON object per line, each with the
container's next sequence number.

The file is the durable buffer between whoever produces events (the agent, or the shim while the
command runs) and the agent's delivery to the master: lines stay here until the master has
acknowledged them, across reconnects and agent restarts. Sequence numbers are assigned under the
writer's lock in the same step as the write, so file order is sequence order.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# How much of the file one read pulls into memory at most.
_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class LogEvent:
    seq: int
    time: float
    stdtype: str  # "stdout" | "stderr"
    message: str
    level: str = ""
    rank: int | None = None
    source: str = "task"  # "task" (user code) | "agent" (the agent's or shim's own notes)


@dataclass(frozen=True)
class StateEvent:
    seq: int
    time: float
    state: str  # a containers.states.ContainerState name
    exit_code: int | None = None
    failure: str = ""  # a containers.states.FailureType name, "" for none
    message: str = ""


Event = LogEvent | StateEvent


@dataclass(frozen=True)
class LogLine:
    """A line about to be written; the writer gives it its seq and time."""

    stdtype: str
    message: str
    level: str = ""
    rank: int | None = None
    source: str = "task"


def encode(event: Event) -> bytes:
    record: dict[str, Any]
    if isinstance(event, LogEvent):
        record = {
            "seq": event.seq,
            "t": event.time,
            "kind": "log",
            "std": event.stdtype,
            "msg": event.message,
        }
        if event.level:
            record["lvl"] = event.level
        if event.rank is not None:
            record["rank"] = event.rank
        if event.source != "task":
            record["src"] = event.source
    else:
        record = {"seq": event.seq, "t": event.time, "kind": "state", "state": event.state}
        if event.exit_code is not None:
            record["exit_code"] = event.exit_code
        if event.failure:
            record["failure"] = event.failure
        if event.message:
            record["msg"] = event.message
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> Event:
    """One line of the file; ValueError when it is not a well-formed event."""
    try:
        record = json.loads(line)
        kind = record["kind"]
        seq = int(record["seq"])
        at = float(record["t"])
        if kind == "log":
            rank = record.get("rank")
            return LogEvent(
                seq=seq,
                time=at,
                stdtype=str(record["std"]),
                message=str(record["msg"]),
                level=str(record.get("lvl", "")),
                rank=int(rank) if rank is not None else None,
                source=str(record.get("src", "task")),
            )
        if kind == "state":
            code = record.get("exit_code")
            return StateEvent(
                seq=seq,
                time=at,
                state=str(record["state"]),
                exit_code=int(code) if code is not None else None,
                failure=str(record.get("failure", "")),
                message=str(record.get("msg", "")),
            )
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed event line: {exc}") from exc
    raise ValueError(f"malformed event line: unknown kind {kind!r}")


class EventWriter:
    """Appends events to the file, numbering them from `next_seq`. Thread-safe."""

    def __init__(self, path: Path, next_seq: int) -> None:
        self._lock = threading.Lock()
        self._next_seq = next_seq
        self._closed = False
        self._file: IO[bytes] = open(path, "ab")  # noqa: SIM115 - held open for the writer's life

    @property
    def next_seq(self) -> int:
        with self._lock:
            return self._next_seq

    def write_logs(self, lines: Iterable[LogLine]) -> int:
        """Write `lines` in order and flush once; the last seq used (0 if none)."""
        now = time.time()
        last = 0
        with self._lock:
            if self._closed:
                return 0  # a late writer after the owner closed the file: its lines are not ours to add
            for line in lines:
                last = self._next_seq
                self._next_seq += 1
                event = LogEvent(last, now, line.stdtype, line.message, line.level, line.rank, line.source)
                self._file.write(encode(event))
            self._file.flush()
        return last

    def write_state(
        self, state: str, *, exit_code: int | None = None, failure: str = "", message: str = ""
    ) -> StateEvent:
        with self._lock:
            if self._closed:
                raise ValueError("event file already closed")
            event = StateEvent(self._next_seq, time.time(), state, exit_code, failure, message)
            self._next_seq += 1
            self._file.write(encode(event))
            self._file.flush()
        return event

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._file.close()


def repair_tail(path: Path) -> bool:
    """Cut an incomplete last line (its writer died mid-write), so the next append starts a fresh
    line. True when something was cut."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size == 0:
        return False
    with open(path, "rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return False
        # Walk back to the last newline; the file is line-oriented so this is short.
        pos = size
        keep = 0
        while pos > 0:
            step = min(_READ_CHUNK, pos)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                keep = pos + cut + 1
                break
        f.truncate(keep)
    return True


class EventTailer:
    """Reads complete lines appended to the file since the last read, from a byte offset."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self.last_seq = 0
        # True when the last read consumed every complete line the file had.
        self.caught_up = False
        self.bad_lines = 0

    def read(self, max_events: int) -> list[tuple[Event, int]]:
        """Up to `max_events` new events, each with the byte offset just past its line."""
        result: list[tuple[Event, int]] = []
        self.caught_up = False
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            self.caught_up = True
            return result
        # Only repair_tail shrinks the file, and only past what was read: this never moves.
        self.offset = min(self.offset, size)
        with open(self.path, "rb") as f:
            while len(result) < max_events:
                if self.offset >= size:
                    self.caught_up = True
                    break
                f.seek(self.offset)
                chunk = f.read(min(_READ_CHUNK, size - self.offset))
                end = chunk.rfind(b"\n")
                if end < 0:
                    self.caught_up = True  # only a partial line is left
                    break
                pos = 0
                while pos <= end and len(result) < max_events:
                    nl = chunk.index(b"\n", pos)
                    line = chunk[pos:nl]
                    pos = nl + 1
                    line_end = self.offset + pos
                    try:
                        event = decode(line)
                    except ValueError:
                        self.bad_lines += 1
                        continue
                    self.last_seq = max(self.last_seq, event.seq)
                    result.append((event, line_end))
                self.offset += pos
        return result
