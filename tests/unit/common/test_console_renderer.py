"""The services' console lines are structlog's ConsoleRenderer(colors=False) lines, character for
character: PlainConsoleRenderer only renders them faster (services/common/logging.py)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
import structlog

from services.common.logging import PlainConsoleRenderer, configure_logging

RECORDS: list[dict[str, Any]] = [
    # A master's transition, as the shared processors leave it.
    {
        "timestamp": "2026-12-04T07:34:05.465860Z",
        "level": "info",
        "event": "allocation state",
        "logger": "services.master.domain.allocations.allocations",
        "allocation_id": "12.345.1",
        "previous": "RUNNING",
        "state": "TERMINATED",
        "reason": "ended: clean",
        "service": "master",
    },
    # Values that are shown by their repr: texts with blanks, quotes or '=', and what is no text.
    {
        "timestamp": "t",
        "level": "warning",
        "event": "an event longer than thirty characters, not cut",
        "a": "two words",
        "b": 'a "quote"',
        "c": "it's",
        "d": "k=v",
        "e": "tab\there",
        "f": "line\nbreak",
        "g": 3,
        "h": None,
        "i": True,
        "j": [1, "x"],
        "k": {"x": 1},
        "l": 0.5,
        "m": "",
    },
    # No timestamp, no logger; a logger_name; an empty event; a level no style names.
    {"level": "trace", "event": "", "logger_name": "stdlib", "z": 1, "a": 2},
    {"event": "only an event"},
    {"level": "error", "event": "e", "logger": "x", "exception": "Traceback (most recent call):\n  boom"},
    {"level": "info", "event": "s", "stack": "Stack (most recent call last):\n  here"},
    {"level": "info", "event": "both", "stack": "the stack", "exception": "the exception", "k": "v"},
    {"level": "info", "event": "exc_info off", "exc_info": False, "k": "v"},
    {},
]


@pytest.mark.parametrize("record", RECORDS)
def test_the_plain_renderer_writes_what_structlogs_console_renderer_writes(record: dict[str, Any]) -> None:
    ours = PlainConsoleRenderer()(None, "info", dict(record))
    theirs = structlog.dev.ConsoleRenderer(colors=False)(None, "info", dict(record))
    assert ours == theirs


def test_a_record_with_its_exception_still_to_format_is_rendered_by_structlog() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    record = {"level": "error", "event": "failed", "exc_info": exc_info}
    ours = PlainConsoleRenderer()(None, "error", dict(record))
    assert ours.startswith("[error    ] failed")
    assert "ValueError" in ours and "boom" in ours


def test_a_services_console_line_goes_through_the_plain_renderer(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging("master", "console", "INFO")
    try:
        log = structlog.stdlib.get_logger("services.test")
        log.info("trial state", trial_id=7, reason="its code exited 0")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    line = capsys.readouterr().err
    assert "[info     ] trial state" in line
    assert "[services.test] reason='its code exited 0' service=master trial_id=7" in line
