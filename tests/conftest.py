"""Settings for every test run."""

from __future__ import annotations

import gc
import os

import structlog

# Every scheduling pass of every master a test starts (in process or as a process) compares the
# master's incremental view with a whole read of the database, so a change the view missed fails
# a test instead of passing unseen (services/master/domain/scheduling/scheduling_view.py).
os.environ.setdefault("CAIRN_CHECK_SCHEDULING_VIEW", "1")

# In-process services log as structlog does by default (every event to stdout, which pytest keeps
# for a failure's report), but with plain tracebacks: Rich's, the default where rich is installed,
# cost the domain tests about 1 % of their CPU to draw, for the tests that log an expected failure.
structlog.configure(
    processors=[
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.StackInfoRenderer(),
        structlog.dev.set_exc_info,
        structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=False),
        structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback),
    ]
)


def pytest_collection_finish(session: object) -> None:
    # What collection imported (the services, SQLAlchemy's models, the tests) lives as long as the
    # process: kept out of the collector's sweeps, the full ones stop walking it again and again as
    # the tests' own objects come and go (a few per cent of the domain tests' CPU).
    gc.collect()
    gc.freeze()
