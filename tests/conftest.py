"""Settings for every test run."""

from __future__ import annotations

import os

# Every scheduling pass of every master a test starts (in process or as a process) compares the
# master's incremental view with a whole read of the database, so a change the view missed fails
# a test instead of passing unseen (services/master/domain/scheduling/scheduling_view.py).
os.environ.setdefault("CAIRN_CHECK_SCHEDULING_VIEW", "1")
