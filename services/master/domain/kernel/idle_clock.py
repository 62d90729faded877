"""Since when each notebook has said it is idle (Determined's report_idle), on the master's own
monotonic clock. Held in memory: a master restart starts every notebook's idle time over, which
can only keep a notebook longer, never stop it early."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class IdleClock:
    def __init__(self, now: Callable[[], float] = time.monotonic) -> None:
        self._now = now
        self._lock = threading.Lock()
        self._idle_since: dict[str, float] = {}

    def report(self, task_id: str, idle: bool) -> float:
        """Record one report; how many seconds the task has been idle without a break (0 when busy)."""
        now = self._now()
        with self._lock:
            if not idle:
                self._idle_since.pop(task_id, None)
                return 0.0
            since = self._idle_since.setdefault(task_id, now)
        return now - since

    def forget(self, task_id: str) -> None:
        with self._lock:
            self._idle_since.pop(task_id, None)
