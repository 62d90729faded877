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
- **Outages are ridden out**: the report that failed, then each one behind it, is written again
  on its own and in order (the stream's `retry`, outage.ride_out in a thread), before the lane
  opens again. A report that fails with an error of its own (not an outage) ends the stream, as
  it did; the agent sends what was not acknowledged again when it reconnects.
- **Bounded**: at most `depth` reports in flight; the reader waits for the oldest beyond that.
- **The rest waits**: what the stream applies otherwise (log lines, slot reports) waits until the
  reports in flight are stored (`settle`): log lines share the containers' sequence numbers, and
  a slot report is applied after the ends the agent sent before it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial

from cairn.agent.v1 import agent_pb2 as apb
from services.common.logging import get_logger
from services.master.domain.kernel.batched_units import BatchedUnits
from services.master.domain.kernel.context import Work
from services.master.domain.kernel.errors import DatabaseUnavailable
from services.master.domain.kernel.group_commit import EarlierItemFailed, Lane
from services.master.domain.kernel.outage import as_outage
from services.master.domain.scheduling.agent_hub import AgentLink

log = get_logger(__name__)

# Reports of one agent in flight at once. An agent of 8 slots sends about two a slot per trial;
# a resend after a reconnect may be longer, and waits for room.
MAX_IN_FLIGHT = 64

# How the stream writes one report again on its own, riding out an outage: (what, write).
Retry = Callable[[str, Callable[[], object]], Awaitable[object]]


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
    future: asyncio.Future[object]


class ReportPipeline:
    """One agent stream's reports in flight, on the stream's event loop."""

    def __init__(
        self,
        link: AgentLink,
        units: BatchedUnits,
        executor: Executor,
        retry: Retry,
        depth: int = MAX_IN_FLIGHT,
    ) -> None:
        self._link = link
        self._units = units
        self._executor = executor
        self._retry = retry
        self._depth = depth
        self._lane = Lane()
        self._in_flight: deque[_Report] = deque()
        # Writing a failed report and those behind it again; the reader waits for it.
        self._recovery: asyncio.Task[None] | None = None
        self._ended = False
        # Whether the link counts the agent as waiting on the master (AgentLink.behind): from the
        # first report in flight until none is.
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
        future = self._units.submit_async(apply, self._executor, key, self._lane)
        if not self._behind:
            self._behind = True
            self._link.behind()
        self._in_flight.append(_Report(what, apply, key, ack, future))
        future.add_done_callback(self._on_done)

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
        """The stream is over: outcomes still to come are not acted on (the reports are stored all
        the same; the agent sends the unacknowledged ones again on its next stream)."""
        self._ended = True
        if self._recovery is not None:
            self._recovery.cancel()

    def _check_open(self) -> None:
        if self._ended:
            raise StreamEnded

    def _on_done(self, future: asyncio.Future[object]) -> None:
        if not future.cancelled():
            future.exception()  # looked at here, whoever acts on it: never reported as unretrieved
        if not self._ended:
            self._advance()

    def _advance(self) -> None:
        """Acknowledge the stored reports at the head, in order; start writing again from the first
        that failed."""
        if self._recovery is not None:
            return
        acked: dict[str, int] = {}
        while self._in_flight and self._in_flight[0].future.done():
            head = self._in_flight[0]
            if head.future.cancelled() or head.future.exception() is not None:
                self._recovery = asyncio.get_running_loop().create_task(
                    self._recover(), name=f"agent-{self._link.agent_id}-reports-again"
                )
                break
            self._in_flight.popleft()
            if head.ack is not None:
                container_id, seq = head.ack
                acked[container_id] = max(seq, acked.get(container_id, 0))
        if acked:
            self._link.put(apb.MasterMessage(log_ack=apb.LogAck(acked_seq=acked)))
        if not self._in_flight and self._recovery is None:
            self._catch_up()

    async def _recover(self) -> None:
        """Write the failed report at the head, and every report behind it, again: each on its own
        and in order, riding out an outage. Whatever cannot be stored ends the stream."""
        try:
            # Those behind the failed one end too: their lane is closed, they are not written.
            await asyncio.wait([r.future for r in self._in_flight])
            self._lane.reopen()
            warned = False
            while self._in_flight:
                report = self._in_flight[0]
                error = None if report.future.cancelled() else report.future.exception()
                if error is not None and not isinstance(error, EarlierItemFailed):
                    if as_outage(error) is None:
                        raise error
                    if not warned:
                        log.warning("database outage; riding it out", what=report.what, error=str(error))
                        warned = True
                if error is not None or report.future.cancelled():
                    await self._retry(report.what, partial(self._units.run, report.apply, key=report.key))
                self._in_flight.popleft()
                if report.ack is not None:
                    container_id, seq = report.ack
                    self._link.put(apb.MasterMessage(log_ack=apb.LogAck(acked_seq={container_id: seq})))
        except asyncio.CancelledError:
            raise
        except DatabaseUnavailable as exc:
            # The outage outlasted the ride-out. Closing the stream loses nothing: the agent keeps
            # what the master has not acknowledged and sends it again when it reconnects.
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
            if not self._in_flight and not self._ended:
                self._catch_up()

    def _catch_up(self) -> None:
        if self._behind:
            self._behind = False
            self._link.caught_up()

    def _end(self) -> None:
        self._ended = True
        self._link.close()


def _done() -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future
