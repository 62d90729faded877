"""Group commit: what many threads each ask to store at the same moment, stored in one transaction.

A thread that asks while a batch is being written queues behind it; the first thread in the queue
then leads the next batch, writing its own item and every other queued one (up to a bound) in one
go, and the others wait for their outcome. No thread of its own: nothing to start or stop, and a
lone caller writes at once, as if there were no batching. The agent stream uses it for its
agents' state changes (batched_units.py) and log lines (metrics/logs.py).

For a caller, nothing changes but the cost:
- **Order**: a caller waits for its item before it asks again, so one caller's items are written
  in the order it asked; items of different callers were never ordered.
- **All or nothing, then each alone**: `write` stores a batch as a whole or raises. When it raises,
  each item of the batch is written again on its own, so the one that raised fails with its own
  error and the others are stored as they would have been alone. Items must therefore be safe to
  write again (agents' messages carry per-container sequence numbers).
- **Outages**: a lost database connection fails every item of its batch with DatabaseUnavailable
  (each its own exception object), and each caller rides it out as before (outage.ride_out), its
  next try joining a later batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from services.common.logging import get_logger
from services.master.domain.kernel.errors import DatabaseUnavailable
from services.master.domain.kernel.outage import as_outage

log = get_logger(__name__)

I = TypeVar("I")  # noqa: E741 - an item, as R is a result
R = TypeVar("R")


@dataclass(eq=False)
class _Waiting(Generic[I, R]):
    item: I
    done: threading.Event = field(default_factory=threading.Event)
    # Set when the thread waiting on `done` is to lead the next batch rather than read its outcome.
    leads: bool = False
    finished: bool = False
    result: R | None = None
    error: BaseException | None = None

    def finish(self, result: R | None = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.finished = result, error, True
        self.done.set()


@dataclass
class GroupStats:
    """What the batches did (for benches and tests): items written, in how many batches, and how
    many batches were split because an item in them raised."""

    items: int = 0
    batches: int = 0
    split: int = 0


class GroupCommit(Generic[I, R]):
    """`write(items)` stores a batch and returns each item's result, in order."""

    def __init__(self, write: Callable[[Sequence[I]], Sequence[R]], max_batch: int) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._write = write
        self._max_batch = max_batch
        self._mutex = threading.Lock()
        self._queue: list[_Waiting[I, R]] = []
        # True while some thread leads a batch: the queue is never left with no leader.
        self._leading = False
        self.stats = GroupStats()

    def run(self, item: I) -> R:
        """Write `item` with whatever else was asked at the same moment; its result, or its error,
        as if it had been written alone."""
        waiting: _Waiting[I, R] = _Waiting(item)
        with self._mutex:
            self._queue.append(waiting)
            leads = not self._leading
            self._leading = True
        if not leads:
            waiting.done.wait()
            leads = waiting.leads
        if leads:
            self._lead()
        if not waiting.finished:  # pragma: no cover - _lead always finishes the leader's own item
            raise RuntimeError("a group commit ended without an outcome")
        if waiting.error is not None:
            raise waiting.error
        return waiting.result  # type: ignore[return-value]

    @property
    def queued(self) -> int:
        """Items waiting behind the batch being written (for tests)."""
        with self._mutex:
            return len(self._queue)

    @property
    def idle(self) -> bool:
        with self._mutex:
            return not self._leading and not self._queue

    def _lead(self) -> None:
        """Write the next batch (the leader's own item is its first), then hand the lead on to the
        first thread still queued, or give it up."""
        with self._mutex:
            batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
        try:
            self._write_batch(batch)
        finally:
            for waiting in batch:
                if not waiting.finished:  # a BaseException (KeyboardInterrupt) cut the batch short
                    waiting.finish(error=RuntimeError("the batch was interrupted"))
            with self._mutex:
                if self._queue:
                    following = self._queue[0]
                    following.leads = True
                    following.done.set()
                else:
                    self._leading = False

    def _write_batch(self, batch: list[_Waiting[I, R]]) -> None:
        self.stats.batches += 1
        self.stats.items += len(batch)
        try:
            results = self._write([waiting.item for waiting in batch])
        except Exception as exc:
            if len(batch) == 1:
                batch[0].finish(error=exc)
                return
            outage = as_outage(exc)
            if outage is not None:
                # The database is gone for all of them: each caller hears it, as its own error
                # (one exception object raised in many threads would share one traceback).
                for waiting in batch:
                    waiting.finish(
                        error=DatabaseUnavailable(str(outage), commit_unknown=outage.commit_unknown)
                    )
                return
            self.stats.split += 1
            log.info("a batched write raised; writing the batch's items one by one", error=str(exc))
            for waiting in batch:
                self._write_alone(waiting)
            return
        for waiting, result in zip(batch, results, strict=True):
            waiting.finish(result)

    def _write_alone(self, waiting: _Waiting[I, R]) -> None:
        try:
            (result,) = self._write([waiting.item])
        except Exception as exc:
            waiting.finish(error=exc)
        else:
            waiting.finish(result)
