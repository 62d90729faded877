"""The master's own log: a ring bounded in records and bytes with ids that never repeat, read by
offset and limit as Determined's MasterLogs reads its buffer, followed until the reader leaves, and
fed by the process's logging (structlog and stdlib alike)."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import structlog

from services.common.logging import add_log_sink, configure_logging, get_logger, remove_log_sink
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.operations.master_log import (
    RECORD_OVERHEAD_BYTES,
    MasterLogRing,
    level_name,
    read_master_logs,
)


def _ring(count: int, **bounds: int) -> MasterLogRing:
    ring = MasterLogRing(**bounds)
    for i in range(1, count + 1):
        ring.append(1_700_000_000.0 + i, logging.INFO, f"line {i}")
    return ring


def _read(ring: MasterLogRing, offset: int = 0, limit: int = 0) -> list[int]:
    return [
        r.id for r in read_master_logs(ring, offset=offset, limit=limit, follow=False, is_active=lambda: True)
    ]


def test_the_ring_keeps_the_newest_records_within_its_record_bound() -> None:
    ring = _ring(25, max_records=10)
    assert ring.window() == (16, 26)
    assert _read(ring) == list(range(16, 26))
    assert ring.stats()[0] == 10


def test_the_ring_keeps_within_its_byte_bound_and_cuts_huge_messages() -> None:
    ring = MasterLogRing(max_records=1000, max_bytes=10 * (RECORD_OVERHEAD_BYTES + 10), max_message_chars=50)
    for i in range(100):
        ring.append(time.time(), logging.INFO, f"{i:010d}")  # 10 bytes each
    held, size = ring.stats()
    assert held == 10 and size <= 10 * (RECORD_OVERHEAD_BYTES + 10)
    ring.append(time.time(), logging.ERROR, "x" * 500)
    (last,) = ring.after(ring.window()[1] - 2, 5)
    assert last.message.startswith("x" * 50) and "450 more characters not kept" in last.message
    assert last.level == "ERROR"
    assert ring.stats()[1] <= 10 * (RECORD_OVERHEAD_BYTES + 10)


@pytest.mark.parametrize(
    ("offset", "limit", "ids"),
    [
        (0, 0, [1, 2, 3, 4, 5]),
        (2, 0, [3, 4, 5]),
        (0, 2, [1, 2]),
        (-2, 0, [4, 5]),  # `det master logs --tail 2`
        (-9, 0, [1, 2, 3, 4, 5]),
        (9, 0, []),
        (1, 3, [2, 3, 4]),
    ],
)
def test_offset_and_limit_read_as_determined_reads_its_buffer(
    offset: int, limit: int, ids: list[int]
) -> None:
    assert _read(_ring(5), offset, limit) == ids


def test_offsets_count_the_records_held_after_the_ring_dropped_some() -> None:
    ring = _ring(30, max_records=10)
    assert _read(ring, offset=0, limit=2) == [21, 22]
    assert _read(ring, offset=-3) == [28, 29, 30]


def test_limits_are_checked_as_determined_checks_them() -> None:
    ring = _ring(3)
    with pytest.raises(InvalidArgument, match="limit: must be >= 0"):
        _read(ring, limit=-1)
    with pytest.raises(InvalidArgument, match="limit: must be 0 when following"):
        list(read_master_logs(ring, offset=0, limit=5, follow=True, is_active=lambda: True))


def test_following_sends_new_records_until_the_reader_goes_away() -> None:
    ring = _ring(2)
    active = threading.Event()
    active.set()
    received: list[int] = []

    def follow() -> None:
        for record in read_master_logs(ring, offset=-1, limit=0, follow=True, is_active=active.is_set):
            received.append(record.id)

    reader = threading.Thread(target=follow)
    reader.start()
    deadline = time.monotonic() + 5
    while received != [2] and time.monotonic() < deadline:
        time.sleep(0.01)
    ring.append(time.time(), logging.WARNING, "a new one")
    while received != [2, 3] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert received == [2, 3]
    active.clear()
    reader.join(timeout=3)
    assert not reader.is_alive()


def test_closing_the_ring_ends_followers_at_once() -> None:
    ring = _ring(1)
    done = threading.Event()

    def follow() -> None:
        list(read_master_logs(ring, offset=0, limit=0, follow=True, is_active=lambda: True))
        done.set()

    threading.Thread(target=follow, daemon=True).start()
    time.sleep(0.05)
    ring.close()
    assert done.wait(timeout=0.5)


def test_levels_are_determined_log_levels() -> None:
    assert [level_name(n) for n in (5, 10, 20, 30, 40, 50)] == [
        "TRACE",
        "DEBUG",
        "INFO",
        "WARNING",
        "ERROR",
        "CRITICAL",
    ]


def test_the_sink_takes_structlog_and_stdlib_records_as_logfmt_lines() -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging("master")  # as the master's entry point sets it up
    ring = MasterLogRing()
    handler = add_log_sink(ring.append)
    try:
        get_logger("test.sink").info("master ready", grpc_port=8090, database="postgresql", note="a b")
        logging.getLogger("test.sink.stdlib").warning("plain %s", "stdlib")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            get_logger("test.sink").exception("it failed", trial_id=3)
    finally:
        remove_log_sink(handler)
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.reset_defaults()
        structlog.contextvars.clear_contextvars()
    records = ring.after(0, 10)
    assert [(r.level, r.message.splitlines()[0]) for r in records] == [
        ("INFO", 'master ready database=postgresql grpc_port=8090 note="a b"'),
        ("WARNING", "plain stdlib"),
        ("ERROR", "it failed trial_id=3"),
    ]
    assert "RuntimeError: boom" in records[2].message
    get_logger("test.sink").info("after removal")
    assert ring.window()[1] == 4  # nothing more once the sink is removed
