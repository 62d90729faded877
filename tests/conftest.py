"""Settings for every test run."""

from __future__ import annotations

import gc
import os

# Every scheduling pass of every master a test starts (in process or as a process) compares the
# master's incremental view with a whole read of the database, so a change the view missed fails
# a test instead of passing unseen (services/master/domain/scheduling/scheduling_view.py).
os.environ.setdefault("CAIRN_CHECK_SCHEDULING_VIEW", "1")


def pytest_collection_finish(session: object) -> None:
    # What collection imported (the services, SQLAlchemy's models, the tests) lives as long as the
    # process: kept out of the collector's sweeps, the full ones stop walking it again and again as
    # the tests' own objects come and go (a few per cent of the domain tests' CPU).
    gc.collect()
    gc.freeze()
