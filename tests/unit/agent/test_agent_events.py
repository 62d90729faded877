"""The event file: numbered writes, incremental reads from an offset, repair after a torn write."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.agent.runtime.events import (
    EventTailer,
    EventWriter,
    LogEvent,
    LogLine,
    StateEvent,
    decode,
    encode,
    repair_tail,
)


def test_writes_are_numbered_and_read_back_in_order(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path, next_seq=4)
    writer.write_state("RUNNING")
    assert writer.write_logs([LogLine("stdout", "a"), LogLine("stderr", "b", "ERROR", 2)]) == 6
    writer.write_state("TERMINATED", exit_code=3, failure="CONTAINER_FAILED", message="exit 3")
    writer.close()
    assert writer.write_logs([LogLine("stdout", "after close")]) == 0

    tailer = EventTailer(path)
    items = tailer.read(100)
    events = [e for e, _ in items]
    assert [e.seq for e in events] == [4, 5, 6, 7]
    assert isinstance(events[0], StateEvent) and events[0].state == "RUNNING"
    assert events[2] == LogEvent(6, events[2].time, "stderr", "b", "ERROR", 2, "task")
    last = events[3]
    assert isinstance(last, StateEvent) and (last.exit_code, last.failure, last.message) == (
        3,
        "CONTAINER_FAILED",
        "exit 3",
    )
    assert items[-1][1] == path.stat().st_size
    assert tailer.caught_up and tailer.last_seq == 7


def test_reads_resume_from_an_offset_and_respect_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path, 1)
    writer.write_logs([LogLine("stdout", f"l{i}") for i in range(10)])
    tailer = EventTailer(path)
    first = tailer.read(4)
    assert [e.seq for e, _ in first] == [1, 2, 3, 4] and not tailer.caught_up
    resumed = EventTailer(path, offset=first[-1][1])
    assert [e.seq for e, _ in resumed.read(100)] == list(range(5, 11))
    writer.write_logs([LogLine("stdout", "late")])
    assert [e.seq for e, _ in resumed.read(100)] == [11]
    writer.close()


def test_a_torn_last_line_is_left_unread_then_cut(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path, 1)
    writer.write_logs([LogLine("stdout", "whole")])
    writer.close()
    with open(path, "ab") as f:
        f.write(encode(LogEvent(2, 0.0, "stdout", "torn"))[:-10])
    tailer = EventTailer(path)
    assert [e.seq for e, _ in tailer.read(10)] == [1]
    assert tailer.caught_up
    assert repair_tail(path)
    assert not repair_tail(path)
    follow = EventWriter(path, 2)
    follow.write_state("TERMINATED", exit_code=0)
    follow.close()
    assert [e.seq for e, _ in tailer.read(10)] == [2]


def test_malformed_lines_are_refused() -> None:
    with pytest.raises(ValueError):
        decode(b'{"seq": 1}')
    with pytest.raises(ValueError):
        decode(b"not json")
    with pytest.raises(ValueError):
        decode(b'{"seq": 1, "t": 0, "kind": "other"}')
