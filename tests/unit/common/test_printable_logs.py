"""Names users chose are escaped wherever they are shown: in the services' log lines (console,
JSON and the master's own log sink) and in the `cairn` CLI's error line. One function does it
(cairn/printable.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from cairn.cli.errors import CliError
from cairn.printable import printable, printable_lines
from services.common.logging import add_log_sink, configure_logging, get_logger, remove_log_sink

HOSTILE = "exp\x1b[2J\x1b]0;owned\x07\u202etxt.exe\nFAKE LINE\r\u200b"
ESCAPED = "exp\\x1b[2J\\x1b]0;owned\\x07\\u202etxt.exe\\nFAKE LINE\\r\\u200b"


def test_printable_escapes_what_would_act_on_a_terminal_and_keeps_the_rest() -> None:
    assert printable(HOSTILE) == ESCAPED
    assert printable("naïve name\\ (日本) ✓") == "naïve name\\ (日本) ✓"
    assert printable_lines("line one\x1b[1m\nline two\u202e") == "line one\\x1b[1m\nline two\\u202e"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_log_lines_escape_user_supplied_values(
    fmt: str, restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("test", fmt, "INFO")  # type: ignore[arg-type]
    sunk: list[str] = []
    handler = add_log_sink(lambda _t, _level, message: sunk.append(message))
    try:
        get_logger("t").info("experiment created", name=HOSTILE, count=3)
        logging.getLogger("stdlib").warning("renamed to %s", HOSTILE)
    finally:
        remove_log_sink(handler)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err and "\r" not in err
    lines = err.strip().split("\n")
    assert len(lines) == 2  # the newline in the name forged no line
    if fmt == "json":
        records = [json.loads(line) for line in lines]
        assert records[0]["name"] == ESCAPED and records[0]["count"] == 3
        assert records[1]["event"] == f"renamed to {ESCAPED}"
    else:  # key=value pairs are quoted (their backslashes doubled); the message is shown as is
        assert "name='exp\\\\x1b[2J" in lines[0] and f"renamed to {ESCAPED} [stdlib]" in lines[1]
    # The master's own log (`det master logs`) gets the same escaped lines.
    assert len(sunk) == 2 and sunk[1] == f"renamed to {ESCAPED}"
    assert not [message for message in sunk if "\x1b" in message or "\n" in message]


def test_the_cli_error_line_escapes_what_the_master_quoted(capsys: pytest.CaptureFixture[str]) -> None:
    name = "exp\x1b[2J\u202etxt.exe"
    CliError(f"name: experiment {name} exists\nhint: pick another").show()
    err = capsys.readouterr().err
    # Its own line breaks stay; everything else that could act on the terminal is escaped.
    assert err == "error: name: experiment exp\\x1b[2J\\u202etxt.exe exists\nhint: pick another\n"
