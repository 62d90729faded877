"""Calls that hold a server thread while they wait, bounded by kind.

A followed log stream (`logs -f`) holds one of the gRPC server's threads until its trial ends (so
does a live chart's stream of metric samples until it closes); a
running trial's signal watch (WatchAllocationSignals) or Determined's preemption long poll holds
one while it waits for a signal. They used to come out of the same pool as every other call, so a
few hundred of them left nothing for the calls that keep the cluster going (trial reports, agent
streams, logins): at 300 followers, or as many running trials as the pool had threads, the master
answered nothing else. Now the pool is sized as the ordinary calls' threads plus one per slot of
each kind (app.py), and a call past its kind's last slot does not wait: a follower is refused at
once with RESOURCE_EXHAUSTED instead of queueing, a signal watch is told the state as it is and then
RESOURCE_EXHAUSTED (the Core API asks again a little later). So however many there are, they never
take the threads other calls need, and the thread count stays bounded by the settings.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from services.master.domain.kernel.errors import ResourceExhausted


class ThreadSlots:
    def __init__(self, limit: int, refusal: str) -> None:
        self.limit = limit
        self._refusal = refusal
        self._free = threading.BoundedSemaphore(limit)

    @contextlib.contextmanager
    def hold(self, needed: bool = True) -> Iterator[None]:
        """A slot for as long as the block runs, when `needed` (a call that does not wait needs
        none); ResourceExhausted at once when none is free."""
        if not needed:
            yield
            return
        if not self._free.acquire(blocking=False):
            raise ResourceExhausted(self._refusal)
        try:
            yield
        finally:
            self._free.release()


class FollowSlots(ThreadSlots):
    """Followed streams, each with a server thread of its own (--max-log-followers): followed logs
    and the periodic metric samples of a live chart (TrialsSample with period_seconds)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            limit,
            f"follow: this master already serves {limit} followed log streams and live samples (its "
            "--max-log-followers): retry later, or read once without following",
        )


class SignalWaitSlots(ThreadSlots):
    """Signal watches and preemption long polls while they wait (--max-signal-waiters)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            limit,
            f"this master already has {limit} calls waiting for allocation signals (its "
            "--max-signal-waiters): ask again later",
        )


def verdict_waiters(max_signal_waiters: int) -> int:
    """Trials waiting at once for the searcher's verdict on their result: a quarter as many as the
    signal waiters. A pool of their own, since every running trial's watch holds a signal waiter's
    slot for as long as it runs, and a verdict wait refused costs a trial its exit and restart."""
    return max(1, max_signal_waiters // 4)


class VerdictWaitSlots(ThreadSlots):
    """Trials waiting for the searcher's verdict on their result (GetCurrentTrialSearcherOperation,
    at most signals.VERDICT_WAIT_S each)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            limit,
            f"this master already has {limit} trials waiting for the searcher's verdict (a quarter of "
            "its --max-signal-waiters)",
        )
