"""An agent's reports in flight at once: the container state changes, refused starts and log
batches its stream reads are handed to the shared group commits as they are read, several at a
time, instead of each waiting for the one before it to be stored. State changes and refused starts
go to the shared units of work (kernel/batched_units.py), log batches to the log store
(metrics/logs.py), each kind in a lane of the agent's own.

Why: a reader that awaited each report before reading the next put at most one report of its
agent in each batch, so an agent that sent a few at once (a RUNNING and two ends) waited a batch
for each. At 1,000 agents and 500 starts a second that queue was nearly all of a trial's wait from
request to RUNNING (bench/README.md, "What a paced run's RUNNING waits for"). Trials that print
did the same through their log batches: the reader awaited each one (bench/README.md, "Agents
whose trials print").

What the stream keeps, as it was with one report at a time:
- **Order, per container**: a container's reports and log lines share its sequence numbers, and
  the master treats its acknowledged seq as a high-water mark: a later one stored before an
  earlier state change would make the master drop that change as a resend, and an
  acknowledgement recorded before earlier lines are stored would let the agent forget them if the
  master then stopped. So an item is stored after the agent's earlier items about any of its
  containers and before its later ones. Items of one lane are written in the order they are
  queued (group_commit.Lane), so an item waits only where an earlier one about its containers is
  in the other group commit and not yet stored (`_ready`); items about other containers go on.
  Once an item fails, its lane's later items are not written until the failed one is written
  again.
- **Acknowledgement after the commit, in order**: an item is acknowledged once it and every item
  the agent sent before it are stored; the acknowledgements of what one batch settles go out as
  one message.
- **Outages are ridden out** as outage.ride_out rides out a call's (its policy's pauses and
  budget): after a pause every item not stored is queued again in the agent's order, under the
  same rule, still in batches; no thread waits meanwhile. An item that fails with an error of its
  own (not an outage) ends the stream, as it did; the agent sends what was not acknowledged again
  when it reconnects.
- **Bounded**: at most `depth` items in flight; the reader waits for the oldest beyond that.
- **The rest waits**: what the stream applies otherwise (slot reports, system metrics; not
  heartbeats and command acknowledgements, which store nothing) waits until the items in flight
  are stored (`settle`): a slot report is applied after the ends the agent sent before it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import cast

from cairn.agent.v1 import agent_pb2 as apb
from services.common.logging import get_logger
from services.master.domain.kernel import outage
from services.master.domain.kernel.batched_units import BatchedUnits
from services.master.domain.kernel.context import Work
from services.master.domain.kernel.errors import DatabaseUnavailable
from services.master.domain.kernel.group_commit import EarlierItemFailed, Lane
from services.master.domain.scheduling.agent_hub import AgentLink

log = get_logger(__name__)

# Items of one agent in flight at once. An agent of 8 slots sends about two reports a slot per
# trial, and a log batch per container as its lines come; a resend after a reconnect may be
# longer, and waits for room.
MAX_IN_FLIGHT = 64


class StreamEnded(Exception):
    """The pipeline ended its agent's stream (a report that could not be stored): nothing more is
    taken. Already logged."""


# The group commits an agent's items go through, each in a lane of the agent's own: its container
# reports (kernel/batched_units.py) and its log lines (metrics/logs.py).
REPORTS = "reports"
LOGS = "logs"


@dataclass(eq=False)
class _Item:
    what: str
    # Which group commit stores it, and how it is queued there (in the agent's lane for it).
    sink: str
    queue: Callable[[Lane], asyncio.Future[object]]
    # The containers it is about: it is stored after the agent's earlier items about any of them
    # and before its later ones.
    containers: frozenset[str]
    # The container and sequence number to acknowledge once stored (a report), or None: nothing to
    # forget, or (a log batch) what its store returns, the highest stored seq per container.
    ack: tuple[str, int] | None
    # Earlier items about its containers not known to be stored when it was last looked at: it
    # waits for them (_ready). The nearest one per container as it is read; every one after an
    # outage's requeue.
    after: list[_Item] = field(default_factory=list)
    # Its outcome: the pipeline's own (never cancelled); a new one each time it is queued again,
    # None while it waits for an earlier item of another group commit.
    future: asyncio.Future[object] | None = None

    @property
    def stored(self) -> bool:
        future = self.future
        return future is not None and future.done() and not future.cancelled() and future.exception() is None

    def acks(self) -> dict[str, int]:
        if self.ack is not None:
            return {self.ack[0]: self.ack[1]}
        if self.sink == LOGS:
            assert self.future is not None
            return dict(self.future.result())  # type: ignore[call-overload]
        return {}


class ReportPipeline:
    """One agent stream's reports and log batches in flight, on the stream's event loop.
    `executor` runs the report batches' writer (group_commit.py; a log batch's is named by its
    `queue`); `stopping` is the master's stop, which ends an outage's pauses."""

    def __init__(
        self,
        link: AgentLink,
        units: BatchedUnits,
        executor: Executor,
        stopping: threading.Event,
        depth: int = MAX_IN_FLIGHT,
    ) -> None:
        self._link = link
        self._units = units
        self._executor = executor
        self._stopping = stopping
        self._depth = depth
        self._lanes = {REPORTS: Lane(), LOGS: Lane()}
        self._in_flight: deque[_Item] = deque()
        # Items queued nowhere yet: each waits for an earlier item about one of its containers
        # that another group commit has not stored yet. In the agent's order.
        self._held: list[_Item] = []
        # The latest item in flight about each container.
        self._latest: dict[str, _Item] = {}
        # Riding out an outage: queuing the failed report and those behind it again, after a
        # pause. The reader queues nothing new meanwhile.
        self._recovery: asyncio.Task[None] | None = None
        self._ended = False
        # Whether the link counts the agent as waiting on the master (AgentLink.behind): from the
        # first report in flight until none is, or the stream ends.
        self._behind = False

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def submit(
        self,
        what: str,
        apply: Callable[[Work], object],
        key: Hashable | None,
        ack: tuple[str, int] | None,
        containers: Iterable[str] = (),
    ) -> None:
        """Queue a report (a unit of the shared batches) behind the agent's others; returns once
        it is queued (not stored)."""
        units, executor = self._units, self._executor
        await self._add(
            _Item(
                what,
                REPORTS,
                lambda lane: units.submit_async(apply, executor, key, lane),
                frozenset(containers),
                ack,
            )
        )

    async def submit_logs(
        self, what: str, queue: Callable[[Lane], asyncio.Future[dict[str, int]]], containers: Iterable[str]
    ) -> None:
        """Queue a log batch (`queue` hands it to the log store's group commit in a lane) behind
        the agent's others; acknowledged, once stored, with the seqs its store returns."""
        await self._add(
            _Item(
                what, LOGS, cast(Callable[[Lane], asyncio.Future[object]], queue), frozenset(containers), None
            )
        )

    async def _add(self, item: _Item) -> None:
        while self._recovery is not None or len(self._in_flight) >= self._depth:
            if self._recovery is not None:
                await self._recovery
            else:
                await self._wait_for_head()
                self._advance()
            self._check_open()
        self._check_open()
        for container_id in item.containers:
            earlier = self._latest.get(container_id)
            if earlier is not None and earlier not in item.after:
                item.after.append(earlier)
            self._latest[container_id] = item
        if not self._behind:
            self._behind = True
            self._link.behind()
        self._in_flight.append(item)
        if self._ready(item):
            self._send(item)
        else:
            self._held.append(item)

    async def settle(self) -> None:
        """Wait until every item in flight is stored and acknowledged."""
        while self._in_flight or self._recovery is not None:
            if self._recovery is not None:
                await self._recovery
            else:
                await asyncio.wait(
                    [r.future for r in self._in_flight if r.future is not None and not r.future.done()]
                    or [_done()]
                )
                self._advance()
            self._check_open()

    def close(self) -> None:
        """The stream is over: outcomes still to come are not acted on. Reports already queued are
        written all the same unless their lane closed first; whatever was not acknowledged the
        agent sends again on its next stream (stored once: sequence numbers)."""
        self._ended = True
        if self._recovery is not None:
            self._recovery.cancel()
        self._held.clear()
        self._catch_up()

    async def _wait_for_head(self) -> None:
        """Wait for the oldest item queued in a group commit to have its outcome. (The head is
        queued: every item before it is stored, so it waits for none.)"""
        queued = next((r.future for r in self._in_flight if r.future is not None), None)
        await asyncio.wait([queued or _done()])

    def _ready(self, item: _Item) -> bool:
        """Whether `item` may be queued: every earlier item about one of its containers is stored,
        or is queued ahead of it in the same lane (which writes them in order)."""
        waiting = []
        for earlier in item.after:
            if earlier.stored:
                continue
            if earlier.sink != item.sink or earlier.future is None:
                return False
            waiting.append(earlier)
        item.after = waiting
        return True

    def _pump(self) -> None:
        """Queue the held items that now may be, in the agent's order."""
        held, self._held = self._held, []
        for n, item in enumerate(held):
            if self._ready(item):
                try:
                    self._send(item)
                except BaseException:
                    # Not queued: it and those after it stay held, in order.
                    self._held += held[n:]
                    raise
            else:
                self._held.append(item)

    def _send(self, item: _Item) -> None:
        item.after = []  # queued: what it waited for is behind it (or ahead in its lane)
        future = item.queue(self._lanes[item.sink])
        future.add_done_callback(self._on_done)
        item.future = future

    def _check_open(self) -> None:
        if self._ended:
            raise StreamEnded

    def _on_done(self, future: asyncio.Future[object]) -> None:
        if not future.cancelled():
            future.exception()  # looked at here, whoever acts on it: never reported as unretrieved
        self._advance()

    def _advance(self) -> None:
        """Acknowledge the stored reports at the head, in order, and queue what waited for them;
        ride out the failure of the first that was not stored."""
        if self._ended or self._recovery is not None:
            return
        if self._take_stored():
            self._recovery = asyncio.get_running_loop().create_task(
                self._recover(), name=f"agent-{self._link.agent_id}-reports-again"
            )
            return
        if self._held:
            self._pump()
        if not self._in_flight:
            self._catch_up()

    def _take_stored(self) -> bool:
        """Take the stored items off the head and acknowledge them, in one message; whether the
        head is then one that failed."""
        acked: dict[str, int] = {}
        failed = False
        while self._in_flight:
            head = self._in_flight[0]
            if not head.stored:
                failed = head.future is not None and head.future.done()
                break
            self._in_flight.popleft()
            for container_id in head.containers:
                if self._latest.get(container_id) is head:
                    del self._latest[container_id]
            for container_id, seq in head.acks().items():
                acked[container_id] = max(seq, acked.get(container_id, 0))
        if acked:
            self._link.put(apb.MasterMessage(log_ack=apb.LogAck(acked_seq=acked)))
        return failed

    async def _recover(self) -> None:
        """Ride out the failure at the head: once every item queued has its outcome (those behind
        the failed one in its lane were not written: the lane is closed), pause, reopen the lanes
        and queue again, in order, every item not stored; until all are stored, or the outage
        outlasts the policy's budget, or an item fails with an error of its own. Either of those
        ends the stream."""
        policy = outage.OUTAGE_POLICY
        delays = policy.delays()
        started = time.monotonic()
        tries = 0
        try:
            while True:
                await asyncio.wait([r.future for r in self._in_flight if r.future is not None] or [_done()])
                if not self._take_stored():
                    break
                head = self._in_flight[0]
                assert head.future is not None
                if head.future.cancelled():
                    raise RuntimeError("a report's outcome was cancelled")  # the pipeline's own: never
                error = head.future.exception()
                assert error is not None
                if isinstance(error, EarlierItemFailed):
                    # Its lane closed behind another item's failure. That may be an item queued
                    # ahead of it in the lane though later in the agent's order (it was held
                    # meanwhile): an error of its own ends the stream now, not after a pause.
                    error = next((e for e in self._errors() if not isinstance(e, EarlierItemFailed)), error)
                lost = outage.as_outage(error)
                if lost is None and not isinstance(error, EarlierItemFailed):
                    raise error
                tries += 1
                delay = next(delays)
                elapsed = time.monotonic() - started
                if elapsed + delay > policy.budget_s or self._stopping.is_set():
                    raise DatabaseUnavailable(
                        f"{head.what}: {error}; gave up after {tries} tries over {elapsed:.0f} s"
                    ) from error
                log.warning(
                    "database outage; storing an agent's reports again",
                    what=head.what,
                    reports=len(self._in_flight),
                    attempt=tries,
                    in_s=round(delay, 2),
                    error=str(error),
                )
                self._link.heard()
                await asyncio.sleep(delay)
                for lane in self._lanes.values():
                    lane.reopen()
                self._held = []
                earlier: list[_Item] = []
                for item in self._in_flight:
                    if not item.stored:
                        item.future = None
                        item.after = [e for e in earlier if e.containers & item.containers]
                        self._held.append(item)
                    earlier.append(item)
                self._pump()
        except asyncio.CancelledError:
            raise
        except DatabaseUnavailable as exc:
            # Closing the stream loses nothing: the agent keeps what the master has not
            # acknowledged and sends it again when it reconnects.
            self._end()
            log.warning(
                "database unavailable; closing an agent's stream",
                agent_id=self._link.agent_id,
                error=str(exc),
            )
        except Exception:
            self._end()
            log.exception(
                "failed storing a report from an agent; closing its stream", agent_id=self._link.agent_id
            )
        finally:
            self._recovery = None
            if not self._in_flight:
                self._catch_up()
            elif not self._ended and self._held:
                self._pump()

    def _errors(self) -> list[BaseException]:
        """The errors of the items in flight that failed, in the agent's order."""
        return [
            error
            for item in self._in_flight
            if item.future is not None
            and item.future.done()
            and not item.future.cancelled()
            and (error := item.future.exception()) is not None
        ]

    def _catch_up(self) -> None:
        if self._behind:
            self._behind = False
            self._link.caught_up()

    def _end(self) -> None:
        self._ended = True
        self._held.clear()
        self._catch_up()
        self._link.close()


def _done() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future
