"""An agent's reports in flight at once: the container state changes and refused starts its stream
reads are handed to the shared batches (kernel/batched_units.py) as they are read, several at a
time, instead of each waiting for the one before it to be stored.

Why: a reader that awaited each report before reading the next put at most one report of its
agent in each batch, so an agent that sent a few at once (a RUNNING and two ends) waited a batch
for each. At 1,000 agents and 500 starts a second that queue was nearly all of a trial's wait from
request to RUNNING (bench/README.md, "What a paced run's RUNNING waits for").

What the stream keeps, as it was with one report at a time:
- **Order**: an agent's reports are stored in the order it sent them. They are queued in one lane
  (group_commit.Lane); once one of them fails, the lane's later ones are not written until the
  failed one has been written again. A container's later report stored before an earlier one
  would make the master drop the earlier one as a resend (its sequence number is below the
  container's acknowledged one).
- **Acknowledgement after the commit, in order**: a report is acknowledged once it and every report
  the agent sent before it are stored; the acknowledgements one batch settles go out as one message.
- **Outages are ridden out** as outage.ride_out rides out a call's (its policy's pauses and
  budget): the lane is closed at the first failure, and after a pause the report that failed and
  every one behind it are queued again in order, still in batches; no thread waits meanwhile.
  A report that fails with an error of its own (not an outage) ends the stream, as it did; the
  agent sends what was not acknowledged again when it reconnects.
- **Bounded**: at most `depth` reports in flight; the reader waits for the oldest beyond that.
- **The rest waits**: what the stream applies otherwise (log lines, slot reports, system metrics;
  not heartbeats and command acknowledgements, which store nothing) waits until the reports in
  flight are stored (`settle`): log lines share the containers' sequence numbers, and a slot
  report is applied after the ends the agent sent before it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Executor
from dataclasses import dataclass

from cairn.agent.v1 import agent_pb2 as apb
from services.common.logging import get_logger
from services.master.domain.kernel import outage
from services.master.domain.kernel.batched_units import BatchedUnits
from services.master.domain.kernel.context import Work
from services.master.domain.kernel.errors import DatabaseUnavailable
from services.master.domain.kernel.group_commit import EarlierItemFailed, Lane
from services.master.domain.scheduling.agent_hub import AgentLink

log = get_logger(__name__)

# Reports of one agent in flight at once. An agent of 8 slots sends about two a slot per trial;
# a resend after a reconnect may be longer, and waits for room.
MAX_IN_FLIGHT = 64


class StreamEnded(Exception):
    """The pipeline ended its agent's stream (a report that could not be stored): nothing more is
    taken. Already logged."""


@dataclass(eq=False)
class _Report:
    what: str
    apply: Callable[[Work], object]
    # What the batch's `prepare` reads for it (containers.ReportKey), or None.
    key: Hashable | None
    # The container and sequence number to acknowledge once stored, or None (nothing to forget).
    ack: tuple[str, int] | None
    # Its outcome: the pipeline's own (never cancelled); a new one each time it is queued again.
    future: asyncio.Future[object]


class ReportPipeline:
    """One agent stream's reports in flight, on the stream's event loop. `executor` runs the
    batches' writer (group_commit.py); `stopping` is the master's stop, which ends an outage's
    pauses."""

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
        self._lane = Lane()
        self._in_flight: deque[_Report] = deque()
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
        self, what: str, apply: Callable[[Work], object], key: Hashable | None, ack: tuple[str, int] | None
    ) -> None:
        """Queue a report behind the agent's others; returns once it is queued (not stored)."""
        while self._recovery is not None or len(self._in_flight) >= self._depth:
            if self._recovery is not None:
                await self._recovery
            else:
                await asyncio.wait([self._in_flight[0].future])
                self._advance()
            self._check_open()
        self._check_open()
        report = _Report(what, apply, key, ack, self._queue(apply, key))
        if not self._behind:
            self._behind = True
            self._link.behind()
        self._in_flight.append(report)

    async def settle(self) -> None:
        """Wait until every report in flight is stored and acknowledged."""
        while self._in_flight or self._recovery is not None:
            if self._recovery is not None:
                await self._recovery
            else:
                await asyncio.wait([r.future for r in self._in_flight if not r.future.done()] or [_done()])
                self._advance()
            self._check_open()

    def close(self) -> None:
        """The stream is over: outcomes still to come are not acted on. Reports already queued are
        written all the same unless their lane closed first; whatever was not acknowledged the
        agent sends again on its next stream (stored once: sequence numbers)."""
        self._ended = True
        if self._recovery is not None:
            self._recovery.cancel()
        self._catch_up()

    def _queue(self, apply: Callable[[Work], object], key: Hashable | None) -> asyncio.Future[object]:
        future = self._units.submit_async(apply, self._executor, key, self._lane)
        future.add_done_callback(self._on_done)
        return future

    def _check_open(self) -> None:
        if self._ended:
            raise StreamEnded

    def _on_done(self, future: asyncio.Future[object]) -> None:
        if not future.cancelled():
            future.exception()  # looked at here, whoever acts on it: never reported as unretrieved
        self._advance()

    def _advance(self) -> None:
        """Acknowledge the stored reports at the head, in order; ride out the failure of the first
        that was not."""
        if self._ended or self._recovery is not None:
            return
        if self._take_stored():
            self._recovery = asyncio.get_running_loop().create_task(
                self._recover(), name=f"agent-{self._link.agent_id}-reports-again"
            )
        elif not self._in_flight:
            self._catch_up()

    def _take_stored(self) -> bool:
        """Take the stored reports off the head and acknowledge them, in one message; whether the
        head is then a report that failed."""
        acked: dict[str, int] = {}
        failed = False
        while self._in_flight and self._in_flight[0].future.done():
            head = self._in_flight[0]
            if head.future.cancelled() or head.future.exception() is not None:
                failed = True
                break
            self._in_flight.popleft()
            if head.ack is not None:
                container_id, seq = head.ack
                acked[container_id] = max(seq, acked.get(container_id, 0))
        if acked:
            self._link.put(apb.MasterMessage(log_ack=apb.LogAck(acked_seq=acked)))
        return failed

    async def _recover(self) -> None:
        """Ride out the failure at the head: once every report in flight has its outcome (those
        behind the failed one were not written: their lane is closed), pause, reopen the lane and
        queue the failed report and every one behind it again, in order; until all are stored, or
        the outage outlasts the policy's budget, or a report fails with an error of its own.
        Either of those ends the stream."""
        policy = outage.OUTAGE_POLICY
        delays = policy.delays()
        started = time.monotonic()
        tries = 0
        try:
            while True:
                await asyncio.wait([r.future for r in self._in_flight])
                if not self._take_stored():
                    break
                head = self._in_flight[0]
                if head.future.cancelled():
                    raise RuntimeError("a report's outcome was cancelled")  # the pipeline's own: never
                error = head.future.exception()
                assert error is not None
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
                self._lane.reopen()
                for report in self._in_flight:
                    report.future = self._queue(report.apply, report.key)
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

    def _catch_up(self) -> None:
        if self._behind:
            self._behind = False
            self._link.caught_up()

    def _end(self) -> None:
        self._ended = True
        self._catch_up()
        self._link.close()


def _done() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future
