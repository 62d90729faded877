"""Many small units of work from many threads, committed together (group commit).

Each agent's stream applies its messages one at a time and in order, and each message (a
container's state change, a refused start) is a unit of work of its own. At a thousand agents that
was a thousand transactions a second, one after another under the master's lock, each paying for
its lock, its BEGIN and COMMIT (an fsync on SQLite, round trips on PostgreSQL) and its post-commit
wake-ups. Here the threads that arrive while a batch is being applied queue behind it, and the next
batch applies all of them in one unit of work: the first thread in the queue leads it (no thread of
its own, nothing to start or stop), the others wait for their outcome.

What does not change for a caller:
- **Order**: a thread waits for its unit before it sends the next one, so one stream's units are
  applied in the order it sent them; units of different streams were never ordered.
- **Exactly once**: a batch commits as a whole or not at all. Units must be safe to run again
  (agent messages carry per-container sequence numbers), because a batch that fails is run again:
  a unit that raises rolls back the batch, and then each of its units runs alone, so the one that
  raised fails with its own error and the others commit as they would have alone.
- **Outages**: a lost connection fails every unit of the batch with DatabaseUnavailable, and each
  caller rides it out as it did (outage.ride_out), its next try joining a later batch.
- **Effects**: post-commit effects run after the batch's commit; checks owed once per key before
  the commit (Work.once_before_commit) run once for the batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from services.common.logging import get_logger
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import DatabaseUnavailable
from services.master.domain.kernel.outage import as_outage

log = get_logger(__name__)

T = TypeVar("T")

# Enough to take the units of a thousand agents' burst in a few batches, few enough that one batch
# holds the master's lock for tens of milliseconds, not seconds (a unit costs ~1-3 ms of CPU).
MAX_BATCH = 64


@dataclass(eq=False)
class _Unit(Generic[T]):
    apply: Callable[[Work], T]
    # What the unit is about, handed with the batch's others to `prepare` (a container's id).
    key: Hashable | None = None
    done: threading.Event = field(default_factory=threading.Event)
    # Set when the thread waiting on `done` is to lead the next batch rather than read its outcome.
    leads: bool = False
    finished: bool = False
    result: T | None = None
    error: BaseException | None = None

    def finish(self, result: T | None = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.finished = result, error, True
        self.done.set()


@dataclass
class BatchStats:
    """What the batches did, for /metrics and benches: how many units in how many batches, and how
    many batches had to be split because a unit in them raised."""

    units: int = 0
    batches: int = 0
    split: int = 0


class BatchedUnits:
    """`prepare`, if given, runs first in each batch's unit of work with the keys its units were run
    with: it reads up front, in one statement, what each unit would read on its own (into the
    session and Work.memo), so a batch of N pays one read, not N."""

    def __init__(
        self,
        ctx: MasterContext,
        max_batch: int = MAX_BATCH,
        prepare: Callable[[Work, list[Hashable]], None] | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._ctx = ctx
        self._max_batch = max_batch
        self._prepare = prepare
        self._mutex = threading.Lock()
        self._queue: list[_Unit[object]] = []
        # True while some thread leads a batch: the queue is never left with no leader.
        self._leading = False
        self.stats = BatchStats()

    def run(self, apply: Callable[[Work], T], key: Hashable | None = None) -> T:
        """Apply `apply` in a unit of work shared with whatever other threads asked at the same
        time; its result, or its error, as if it had run alone."""
        unit: _Unit[T] = _Unit(apply, key)
        with self._mutex:
            self._queue.append(unit)  # type: ignore[arg-type]
            leads = not self._leading
            self._leading = True
        if not leads:
            unit.done.wait()
            leads = unit.leads
        if leads:
            self._lead()
        if not unit.finished:  # pragma: no cover - _lead always finishes the leader's own unit
            raise RuntimeError("a batched unit of work ended without an outcome")
        if unit.error is not None:
            raise unit.error
        return unit.result  # type: ignore[return-value]

    def _lead(self) -> None:
        """Apply the next batch (the leader's own unit is its first), then hand the lead on to the
        first thread still queued, or give it up."""
        with self._mutex:
            batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
        try:
            self._apply(batch)
        finally:
            for unit in batch:
                if not unit.finished:  # a BaseException (KeyboardInterrupt) cut the batch short
                    unit.finish(error=RuntimeError("the batch of units of work was interrupted"))
            with self._mutex:
                if self._queue:
                    following = self._queue[0]
                    following.leads = True
                    following.done.set()
                else:
                    self._leading = False

    def _apply(self, batch: list[_Unit[object]]) -> None:
        self.stats.batches += 1
        self.stats.units += len(batch)
        try:
            with self._ctx.unit_of_work() as w:
                if self._prepare is not None and len(batch) > 1:
                    self._prepare(w, [unit.key for unit in batch if unit.key is not None])
                results = [unit.apply(w) for unit in batch]
        except Exception as exc:
            if len(batch) == 1:
                batch[0].finish(error=exc)
                return
            outage = as_outage(exc)
            if outage is not None:
                # The database is gone for all of them: each caller hears it, as its own error
                # (one exception object raised in many threads would share one traceback).
                for unit in batch:
                    unit.finish(error=DatabaseUnavailable(str(outage), commit_unknown=outage.commit_unknown))
                return
            self.stats.split += 1
            log.info("a batched unit of work raised; applying the batch's units one by one", error=str(exc))
            for unit in batch:
                self._apply_alone(unit)
            return
        for unit, result in zip(batch, results, strict=True):
            unit.finish(result)

    def _apply_alone(self, unit: _Unit[object]) -> None:
        try:
            with self._ctx.unit_of_work() as w:
                result = unit.apply(w)
        except Exception as exc:
            unit.finish(error=exc)
        else:
            unit.finish(result)
