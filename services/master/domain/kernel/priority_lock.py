"""The master's process-wide lock, handed on by lane: a scheduling pass's placements first, then
what the agents report, then users' requests, then the background loops.

Every unit of work holds the one lock (context.py says why). At a thousand agents it is held nearly
all the time, and a plain lock goes to whichever waiter gets there first: the agents' RUNNING
reports then queued behind experiment creation and the searcher pump, and the time from a trial's
request to RUNNING grew to 4-13 s at 500 starts a second while the scheduler kept up
(bench/README.md, "The master's lock, handed on by lane"). Served by lane, the same work takes the
same lock time in a better order, much as Kubernetes' API Priority and Fairness puts the nodes'
and controllers' traffic before users' requests:
- PLACEMENT: a pass's starts, a chunk at a time (scheduling.APPLY_CHUNK), which turn free slots
  into work;
- AGENT_REPORTS: what is already true on the machines (a container RUNNING or exited, slots
  freed), which the next pass and every reader wait for;
- REQUESTS: users' calls, and any thread that names no lane;
- BACKGROUND: the loops that catch up in batches (searcher pump, deferred work, liveness,
  retention).

No waiter starves: one that has waited MAX_WAIT_S goes before every lane, oldest first. The lock
is reentrant, as the threading.RLock it replaces, and is handed directly to the chosen waiter, so
no thread can slip in between.
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

# Long enough that the lanes' order holds under a burst (a batch holds the lock 50-300 ms), short
# enough that a background loop's unit, or a user's call, is never held back for long.
MAX_WAIT_S = 2.0


class Lane(enum.IntEnum):
    """Lower goes first."""

    PLACEMENT = 0
    AGENT_REPORTS = 1
    REQUESTS = 2
    BACKGROUND = 3


_thread_lane = threading.local()


def set_thread_lane(lane: Lane) -> None:
    """The lane of the units this thread takes the lock for, unless a unit names its own (a
    background loop's thread sets BACKGROUND, the scheduling loop PLACEMENT, the agent streams'
    threads AGENT_REPORTS)."""
    _thread_lane.lane = lane


def thread_lane() -> Lane:
    """REQUESTS unless the thread said otherwise: request handlers need not say anything."""
    return getattr(_thread_lane, "lane", Lane.REQUESTS)


@dataclass(order=True)
class _Waiter:
    lane: Lane
    seq: int
    since: float = field(compare=False)
    thread: int = field(compare=False)
    # Held from the start; the lock's holder releases it to hand the lock over.
    gate: threading.Lock = field(compare=False, default_factory=threading.Lock)


class PriorityLock:
    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self._max_wait_s = max_wait_s
        self._mutex = threading.Lock()
        self._owner: int | None = None
        self._depth = 0
        self._waiters: list[_Waiter] = []
        self._seq = itertools.count()

    @property
    def waiting(self) -> int:
        """How many threads wait for the lock now."""
        return len(self._waiters)

    def acquire(self, blocking: bool = True, timeout: float = -1, lane: Lane | None = None) -> bool:
        me = threading.get_ident()
        with self._mutex:
            if self._owner == me:
                self._depth += 1
                return True
            if self._owner is None and not self._waiters:
                self._owner, self._depth = me, 1
                return True
            if not blocking:
                return False
            waiter = _Waiter(thread_lane() if lane is None else lane, next(self._seq), time.monotonic(), me)
            waiter.gate.acquire()
            self._waiters.append(waiter)
        if waiter.gate.acquire(timeout=timeout):
            return True
        with self._mutex:
            if self._owner == me:  # handed over while the wait timed out
                return True
            self._waiters.remove(waiter)
            return False

    def release(self) -> None:
        with self._mutex:
            if self._owner != threading.get_ident():
                raise RuntimeError("cannot release a lock this thread does not hold")
            self._depth -= 1
            if self._depth:
                return
            if not self._waiters:
                self._owner = None
                return
            chosen = self._next()
            self._waiters.remove(chosen)
            self._owner, self._depth = chosen.thread, 1
            chosen.gate.release()

    def _next(self) -> _Waiter:
        """The oldest waiter past MAX_WAIT_S, else the first of the lowest lane. A linear look: the
        waiters are the master's threads, a hundred at most."""
        overdue = time.monotonic() - self._max_wait_s
        oldest = min(self._waiters, key=lambda w: w.seq)
        if oldest.since <= overdue:
            return oldest
        return min(self._waiters)

    def held(self, lane: Lane | None) -> _Held:
        """`with lock.held(lane):` takes the lock in `lane` (None: the thread's lane)."""
        return _Held(self, lane)

    def __enter__(self) -> PriorityLock:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class _Held:
    def __init__(self, lock: PriorityLock, lane: Lane | None) -> None:
        self._lock = lock
        self._lane = lane

    def __enter__(self) -> None:
        self._lock.acquire(lane=self._lane)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.release()


class SlicedHold:
    """`lock` held across many units of work (a pass's chunks of starts), let go once every
    `slice_s` at a `turn()` so that the best waiter goes once before this thread takes it again:
    the units run back to back without the others' batches between each two, and no waiter is
    kept out for longer than a slice and a unit. Taken in the thread's lane."""

    def __init__(self, lock: PriorityLock, slice_s: float) -> None:
        self._lock = lock
        self._slice_s = slice_s
        self._since = 0.0

    def __enter__(self) -> SlicedHold:
        self._lock.acquire()
        self._since = time.monotonic()
        return self

    def turn(self) -> None:
        if time.monotonic() - self._since < self._slice_s:
            return
        self._lock.release()
        self._lock.acquire()
        self._since = time.monotonic()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.release()
