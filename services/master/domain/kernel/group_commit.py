"""Group commit: what many threads each ask to store at the same moment, stored in one transaction.

A thread that asks while a batch is being written queues behind it; the first thread in the queue
then leads the next batch, writing its own item and every other queued one (up to a bound) in one
go, and the others wait for their outcome. No thread of its own: nothing to start or stop, and a
lone caller writes at once, as if there were no batching. The agent stream uses it for its
agents' state changes (batched_units.py) and log lines (metrics/logs.py).

Callers on an event loop (the agent streams' readers) queue theirs with `submit_async` (or await
`run_async`) instead: they hold no thread while they wait. The first of them to find no leader
starts one in the executor it names, which writes batch after batch while async callers' items
are queued; each batch's outcomes reach the loop in one callback. A thread per message, woken to
lead or to read its outcome, cost more than the message's own work (bench.trial_phases: a state
change's end 0.6 ms of CPU with a thread each, 0.3 in batches one thread writes).

For a caller, nothing changes but the cost:
- **Order**: a caller that waits for its item before it asks again has its items written in the
  order it asked (one with several queued at once names a lane: below); items of different
  callers were never ordered.
- **All or nothing, then each alone**: `write` stores a batch as a whole or raises. When it raises,
  each item of the batch is written again on its own, so the one that raised fails with its own
  error and the others are stored as they would have been alone. Items must therefore be safe to
  write again (agents' messages carry per-container sequence numbers).
- **Outages**: a lost database connection fails every item of its batch with DatabaseUnavailable
  (each its own exception object), and each caller rides it out as before (outage.ride_out), its
  next try joining a later batch.

A caller on a loop may also have several items queued at once (`submit_async`, in a `Lane`): an
agent's stream hands on its reports as it reads them rather than one at a time. The lane keeps
them in order: batches are written one after another and each in queue order, and once one of a
lane's items ends in an error, its later items are not written (they fail with EarlierItemFailed)
until the caller, once every item it queued has its outcome, reopens the lane and queues the
failed ones again, queuing nothing new meanwhile. So no item of a lane is ever stored after a
later one (an agent's container reports: a later sequence number stored first
would make the master drop the earlier one as a resend).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from services.common.logging import get_logger
from services.master.domain.kernel.errors import DatabaseUnavailable
from services.master.domain.kernel.outage import as_outage

log = get_logger(__name__)

I = TypeVar("I")  # noqa: E741 - an item, as R is a result
R = TypeVar("R")


class EarlierItemFailed(Exception):
    """An item not written because an earlier item of its lane ended in an error."""


class Lane:
    """One caller's items that may be queued at once, written in the order they were queued. Closed
    by the writer when one of them ends in an error; reopened by the caller (`reopen`) once every
    item it queued has its outcome, before it queues the failed ones again."""

    def __init__(self) -> None:
        self.closed = False

    def reopen(self) -> None:
        self.closed = False


@dataclass(eq=False)
class _Waiting(Generic[I, R]):
    item: I
    done: threading.Event = field(default_factory=threading.Event)
    # Set when the thread waiting on `done` is to lead the next batch rather than read its outcome.
    leads: bool = False
    finished: bool = False
    result: R | None = None
    error: BaseException | None = None
    # An async caller's (run_async): the future its coroutine awaits on `loop`, and the executor
    # in which a lead is started for it (it has no thread to lead with).
    loop: asyncio.AbstractEventLoop | None = None
    future: asyncio.Future[R] | None = None
    executor: Executor | None = None
    lane: Lane | None = None

    def finish(self, result: R | None = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.finished = result, error, True
        if error is not None and self.lane is not None:
            # Set by the writer before it takes the next batch: the lane's later items wait.
            self.lane.closed = True
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

    async def run_async(self, item: I, executor: Executor) -> R:
        """`run` for a caller on an event loop: no thread waits for the outcome. Where no batch is
        being written, a lead is started in `executor`; it writes this item's batch and every
        batch queued behind it."""
        return await self.submit_async(item, executor)

    def submit_async(self, item: I, executor: Executor, lane: Lane | None = None) -> asyncio.Future[R]:
        """Queue `item` from a coroutine on the running loop; the future of its outcome. A caller
        that queues more before that outcome comes names a lane, which keeps them in order."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        waiting: _Waiting[I, R] = _Waiting(item, loop=loop, future=future, executor=executor, lane=lane)
        with self._mutex:
            self._queue.append(waiting)
            leads = not self._leading
            self._leading = True
        if leads:
            self._start_lead(waiting)
        return future

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
        first thread still queued, or give it up. An async caller first in the queue has no thread
        to lead with: a lead is started for it in its executor."""
        following = self._write_next()
        if following is not None:
            self._start_lead(following)

    def _lead_in_executor(self) -> None:
        """A lead started for async callers: batch after batch while async callers come first in
        the queue; a thread that called `run` and comes first leads its own batch."""
        while self._write_next() is not None:
            # Let go of the GIL between batches: a thread the master's lock woke as this batch
            # released it (a scheduling pass's start) then takes the lock before the next batch
            # does. Without it the lead took the lock back at once, and at 1,000 agents a pass's
            # start waited behind batch after batch (bench.sim_agents: starting p95 0.5-1.9 s
            # against 0.1-0.35 s).
            time.sleep(0)

    def _start_lead(self, first: _Waiting[I, R]) -> None:
        """Start a lead in the executor of `first`, an async caller at the head of the queue. An
        executor that takes no more work (the master is stopping) fails the queue's async callers
        instead; a thread queued behind them is woken to lead its own."""
        assert first.executor is not None
        try:
            first.executor.submit(self._lead_in_executor)
            return
        except RuntimeError as exc:
            error = exc
        with self._mutex:
            failed = [waiting for waiting in self._queue if waiting.future is not None]
            self._queue = [waiting for waiting in self._queue if waiting.future is None]
            following = self._queue[0] if self._queue else None
            if following is None:
                self._leading = False
            else:
                following.leads = True
                following.done.set()
        for waiting in failed:
            waiting.finish(error=RuntimeError(f"no thread to write the batch: {error}"))
        _settle_futures(failed)

    def _write_next(self) -> _Waiting[I, R] | None:
        """Write the next batch, then hand the lead on: to a thread that waits in `run`, woken to
        lead; or, where an async caller comes first, keep it (returned: the caller leads on)."""
        with self._mutex:
            batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
        try:
            self._write_batch(batch)
        finally:
            for waiting in batch:
                if not waiting.finished:  # a BaseException (KeyboardInterrupt) cut the batch short
                    waiting.finish(error=RuntimeError("the batch was interrupted"))
            _settle_futures(batch)
            following = self._hand_on()
        return following

    def _hand_on(self) -> _Waiting[I, R] | None:
        """After a batch: give the lead up, wake the thread first in the queue to lead, or return
        the async caller first in it (whoever wrote the batch leads on for it)."""
        with self._mutex:
            if not self._queue:
                self._leading = False
                return None
            following = self._queue[0]
            if following.future is not None:
                return following
            following.leads = True
            following.done.set()
            return None

    def _write_batch(self, batch: list[_Waiting[I, R]]) -> None:
        batch = [waiting for waiting in batch if not _behind_a_failure(waiting)]
        if not batch:
            return
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
                if not _behind_a_failure(waiting):  # an earlier item of its lane failed alone
                    self._write_alone(waiting)
                    time.sleep(0)  # as between batches (_lead_in_executor): a waiting pass goes first
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


def _behind_a_failure(waiting: _Waiting[I, R]) -> bool:
    """Whether `waiting` is an item of a lane closed by an earlier item's error: it is then finished
    with EarlierItemFailed, unwritten."""
    if waiting.lane is None or not waiting.lane.closed:
        return False
    waiting.finish(error=EarlierItemFailed("an earlier item of its lane was not stored"))
    return True


def _settle_futures(batch: Sequence[_Waiting[I, R]]) -> None:
    """Hand the async callers of a batch their outcomes: one callback on each loop for the batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Waiting[I, R]]] = {}
    for waiting in batch:
        if waiting.loop is not None:
            by_loop.setdefault(waiting.loop, []).append(waiting)
    for loop, waiters in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve, waiters)
        except RuntimeError:
            log.debug("an event loop closed before its batch's outcomes reached it", items=len(waiters))


def _resolve(waiters: list[_Waiting[I, R]]) -> None:
    for waiting in waiters:
        future = waiting.future
        if future is None or future.done():  # its caller was cancelled: the item was written anyway
            continue
        if waiting.error is not None:
            future.set_exception(waiting.error)
        else:
            future.set_result(waiting.result)  # type: ignore[arg-type]
