"""structlog setup shared by every service: console or JSON lines on stderr, stdlib logs included."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, Literal

import structlog

from cairn.printable import printable, printable_lines

LogFormat = Literal["console", "json"]

# Receives (seconds since the epoch, stdlib level number, message) for every record logged.
LogSink = Callable[[float, int, str], None]


# Multi-line by nature: their line breaks stay (everything else in them is escaped).
_MULTILINE_KEYS = frozenset({"exception", "stack"})


def escape_values(
    _logger: Any, _name: str, event_dict: structlog.types.EventDict
) -> structlog.types.EventDict:
    """Every text of a record escaped (cairn/printable.py): log lines quote values users chose
    (names, usernames, paths, request lines), which must not forge lines or drive the terminal
    of whoever reads the log. Other values are rendered by repr, which escapes already."""
    for key, value in event_dict.items():
        if isinstance(value, str):
            event_dict[key] = printable_lines(value) if key in _MULTILINE_KEYS else printable(value)
    return event_dict


_NOTHING = object()
# How wide the event column is padded (ConsoleRenderer's default, passed to it too).
_EVENT_WIDTH = 30
# What makes structlog's console renderer show a text value by its repr.
_REPR_WORTHY = frozenset({" ", "\t", "=", "\r", "\n", '"', "'"})


class PlainConsoleRenderer:
    """structlog's ConsoleRenderer(colors=False), character for character, at a fifth of its cost:
    that renderer builds each column in a StringIO of its own, which was a third of the master's
    log line, and a master at INFO logs about ten lines a trial (its own transitions). Exceptions
    and stacks come as text (format_exc_info, StackInfoRenderer run before); a record that still
    carries exc_info is left to ConsoleRenderer itself. tests/unit/common/test_console_renderer.py
    holds the two to the same output."""

    def __init__(self) -> None:
        self._fallback = structlog.dev.ConsoleRenderer(colors=False, pad_event_to=_EVENT_WIDTH)
        styles = structlog.dev.ConsoleRenderer.get_default_level_styles(colors=False)
        self._level_width = len(max(styles, key=len))

    def __call__(self, logger: Any, name: str, event_dict: structlog.types.EventDict) -> str:
        if event_dict.get("exc_info"):
            return str(self._fallback(logger, name, event_dict))
        stack = event_dict.pop("stack", None)
        exc = event_dict.pop("exception", None)
        event_dict.pop("exc_info", None)
        parts: list[str] = []
        if (timestamp := event_dict.pop("timestamp", _NOTHING)) is not _NOTHING:
            parts.append(str(timestamp))
        if (level := event_dict.pop("level", _NOTHING)) is not _NOTHING:
            parts.append(f"[{str(level).ljust(self._level_width)}]")
        if (event := event_dict.pop("event", _NOTHING)) is not _NOTHING:
            parts.append(str(event).ljust(_EVENT_WIDTH))
        for key in ("logger", "logger_name"):
            if (value := event_dict.pop(key, _NOTHING)) is not _NOTHING:
                parts.append(f"[{value}]")
        for key in sorted(event_dict):
            value = event_dict[key]
            if not isinstance(value, str) or not _REPR_WORTHY.isdisjoint(value):
                value = repr(value)
            parts.append(f"{key}={value}")
        line = " ".join(part for part in parts if part).rstrip(" ")
        if stack is not None:
            line += "\n" + stack
            if exc is not None:
                line += "\n\n" + "=" * 79 + "\n"
        if exc is not None:
            line += "\n" + exc
        return line


def _shared_processors() -> list[structlog.types.Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        escape_values,
    ]


def configure_logging(service: str, fmt: LogFormat = "console", level: str = "INFO") -> None:
    """Route structlog and stdlib logging through one renderer, tagging every line with the service."""
    shared = _shared_processors()
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json" else PlainConsoleRenderer()
    )
    structlog.configure(
        # A record below the level is dropped before any processor runs: stamped, escaped and
        # only then dropped by the stdlib logger, a master's INFO lines about every trial's
        # state cost a quarter of a trial's end when it runs at WARNING.
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )
    # No renderer here shows a record's thread or process: the stdlib need not look them up for
    # every record (the logging HOWTO's "Optimization"; a master at INFO logs ten lines a trial).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Library chatter at INFO drowns the service's own lines.
    for noisy in ("alembic", "sqlalchemy.engine", "botocore", "urllib3", "s3transfer"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.stdlib.get_logger(name)


# Keys the sink keeps apart from the message (time, level) or that every line of a process shares.
_SINK_DROPPED_KEYS = frozenset({"timestamp", "level", "logger", "service", "exception", "stack"})


# What makes a logfmt value need quotes (a scan character by character in Python was a tenth of a
# master's log line).
_NEEDS_QUOTES = re.compile(r'[\s"=]')


def _logfmt_value(value: Any) -> str:
    text = str(value)
    if not text or _NEEDS_QUOTES.search(text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def sink_message(event_dict: Mapping[str, Any]) -> str:
    """One record as a line of text without its time and level: the event, then its context as
    sorted key=value pairs (logfmt, as Determined's master writes its own log), then any traceback."""
    parts = [str(event_dict.get("event", ""))]
    parts.extend(
        f"{key}={_logfmt_value(value)}"
        for key, value in sorted(event_dict.items(), key=lambda item: str(item[0]))
        if key != "event" and key not in _SINK_DROPPED_KEYS
    )
    text = " ".join(part for part in parts if part)
    for key in ("stack", "exception"):
        if event_dict.get(key):
            text += "\n" + str(event_dict[key])
    return text


class _SinkHandler(logging.Handler):
    def __init__(self, sink: LogSink) -> None:
        super().__init__()
        self._sink = sink
        self.setFormatter(
            structlog.stdlib.ProcessorFormatter(
                foreign_pre_chain=_shared_processors(),
                processors=[
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    lambda _logger, _name, event_dict: sink_message(event_dict),
                ],
            )
        )

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._sink(record.created, record.levelno, self.format(record))
        except Exception:
            self.handleError(record)


def add_log_sink(sink: LogSink) -> logging.Handler:
    """Also hand every record the process logs (structlog's and stdlib's, past the root level) to
    `sink`, beside the stderr renderer; returns the handler for remove_log_sink. Used by the master
    for its in-memory log (`det master logs`)."""
    handler = _SinkHandler(sink)
    logging.getLogger().addHandler(handler)
    return handler


def remove_log_sink(handler: logging.Handler) -> None:
    logging.getLogger().removeHandler(handler)
