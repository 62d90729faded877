"""The master's background loops (scheduling, searcher pump, liveness) share one shape: a daemon
thread that runs a step until the master stops, logs a failed step and carries on, and between steps
waits for its wake-up (or its period), never running steps closer together than its minimum gap.
A database outage fails steps until the database is back; the loop goes on meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from services.common.logging import get_logger
from services.master.domain.kernel.context import MasterContext, Wakeup
from services.master.domain.kernel.outage import as_outage

log = get_logger(__name__)


class BackgroundLoop:
    def __init__(
        self,
        ctx: MasterContext,
        name: str,
        step: Callable[[], object],
        *,
        period_s: float,
        wakeup: Wakeup | None = None,
        min_gap_s: float = 0.0,
    ) -> None:
        self._ctx = ctx
        self._name = name
        self._step = step
        self._period_s = period_s
        self._wakeup = wakeup
        self._min_gap_s = min_gap_s
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        stopping = self._ctx.stopping
        while not stopping.is_set():
            started = time.monotonic()
            try:
                self._step()
            except Exception as exc:
                outage = as_outage(exc)
                if outage is not None:
                    # Expected while the database restarts: the next step picks up where this one
                    # stopped (each step works from what is stored), so a line without a trace.
                    log.warning(
                        "database unavailable; the step runs again later", loop=self._name, error=str(outage)
                    )
                else:
                    log.exception("background step failed; continuing", loop=self._name)
            # Bound the rate of steps, whatever wakes the loop.
            rest = self._min_gap_s - (time.monotonic() - started)
            if rest > 0 and stopping.wait(rest):
                return
            if self._wakeup is not None:
                self._wakeup.wait(self._period_s)
            elif stopping.wait(self._period_s):
                return
