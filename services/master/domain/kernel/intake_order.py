"""Metric batches of one trial run stored in the order of their sequence numbers, though the Core
API may have two on the way at once (the next one sent while the last is being stored, so that
neither side waits on the other).

The Core API names, with such a batch, the highest sequence number of the batch before it
(`after_seq`). The master remembers, per trial run, the highest number it committed, and the
batch waits until that reaches `after_seq`, up to a bound; past it the batch is refused as
ABORTED, which the Core API retries (if the batch before failed for good, the trial's metrics
fail loudly rather than land out of order). ABORTED, not UNAVAILABLE: a sequencer check failed,
the request conflicts with the run's state (HTTP 409); the master itself is fine. A run the
master has no mark for (its first batch since the master started) is looked up in the database
once.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

# How long a batch waits for the ones before it (well below the Core API's call timeout).
WAIT_S = 5.0
# Trial runs remembered: the oldest are forgotten first (an idle run's next batch goes at once).
MAX_RUNS = 100_000

RunKey = tuple[int, int]  # (trial id, trial run id)


class IntakeOrder:
    def __init__(self, wait_s: float = WAIT_S, max_runs: int = MAX_RUNS) -> None:
        self._wait_s = wait_s
        self._max_runs = max_runs
        self._stored: OrderedDict[RunKey, int] = OrderedDict()
        self._changed = threading.Condition()

    def wait_turn(self, key: RunKey, after_seq: int, load: Callable[[], int]) -> bool:
        """Wait until the run's reports up to `after_seq` are stored; False when that did not
        happen within the bound. `load` reads the run's highest stored number from the database,
        for a run the master has no mark for."""
        with self._changed:
            known = key in self._stored
        if not known:
            self.stored(key, load())
        deadline = time.monotonic() + self._wait_s
        with self._changed:
            while self._stored.get(key, after_seq) < after_seq:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def stored(self, key: RunKey, max_seq: int) -> None:
        """The run's batches up to `max_seq` are committed."""
        with self._changed:
            self._stored[key] = max(max_seq, self._stored.get(key, 0))
            self._stored.move_to_end(key)
            while len(self._stored) > self._max_runs:
                self._stored.popitem(last=False)
            self._changed.notify_all()
