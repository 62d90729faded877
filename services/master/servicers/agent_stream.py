"""AgentService: the bidirectional stream each agent holds with the master, and task contexts.

An agent's stream is a coroutine on the master's asyncio server (services/common/server.py), not a
thread: a thousand connected agents are a thousand idle tasks on one loop, and a heartbeat is a
timestamp set there. Per stream, a reader task applies what the agent sends, in order, each message
in a small shared thread pool (the database work); the handler's own task sends what the master
queues for the agent (Welcome first, then any backlog, then new commands), woken by the queue
(agent_hub.AgentLink.put), or by the one task that watches every stream's agent for silence
(SilenceWatch). An agent past --max-agents is refused at once with RESOURCE_EXHAUSTED
(it retries with backoff).

What an agent reports of its containers (state changes, refused starts) is applied in units of work
shared with the other agents' reports of the same moment (kernel/batched_units.py): one transaction
for a burst from many agents; their log lines likewise, in the log store's. The reader hands them
on as it reads them, several in flight at once (agent_reports.py), each container's still stored in
the agent's order and acknowledged only once stored.

Who the agent is was established by the interceptor (agent_auth.py); here every hello and every
context download is checked against it: an agent known by its credential speaks only as the id the
credential was issued to, and downloads only the model definitions of its own allocations. A stream
the master shuts out (agent_hub.refuse: a revocation) ends with PERMISSION_DENIED naming why.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar, cast

import grpc

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc
from services.common.interceptors import current_principal
from services.common.logging import get_logger
from services.common.principal import Principal
from services.common.status import abort_with, abort_with_async
from services.master.domain import wiring
from services.master.domain.allocations import containers
from services.master.domain.identity import agent_credentials
from services.master.domain.kernel.batched_units import BatchedUnits
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import DatabaseUnavailable, DomainError, InvalidArgument
from services.master.domain.kernel.outage import ride_out
from services.master.domain.metrics.logs import LogStore
from services.master.domain.metrics.system_metrics import SystemMetricsStore
from services.master.domain.reads.agents import allocation_runs_on
from services.master.domain.reads.tasks import task_context_archive
from services.master.domain.scheduling import agents as agent_registry
from services.master.domain.scheduling.agent_hub import AgentLink
from services.master.servicers.agent_reports import ReportPipeline, StreamEnded
from services.master.servicers.agent_silence import SilenceWatch

log = get_logger(__name__)

CONTEXT_CHUNK = 1024 * 1024
# Threads applying the streams' messages that are not awaited on the loop.
APPLY_THREADS = 64

T = TypeVar("T")


class AgentStreamServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, ctx: MasterContext, logs: LogStore, max_agents: int) -> None:
        self.ctx = ctx
        self.logs = logs
        self.max_agents = max_agents
        self._agent_slots = threading.BoundedSemaphore(max_agents)
        # The agents' state changes and refused starts, applied in shared transactions, and the
        # thread that writes them batch after batch: one of its own, never queued behind the
        # pool's other work (nor behind threads that wait for it).
        self._units = BatchedUnits(ctx, prepare=wiring.preload_agent_reports, purpose="agent_stream.reports")
        self._report_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-reports")
        # The same for the agents' log lines (metrics/logs.py), queued beside the reports.
        self._log_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-logs")
        # Where the streams' other database work runs: slot reports, system metrics, hellos (each
        # on a thread while it waits); a fixed number however many agents there are.
        self._threads = ThreadPoolExecutor(max_workers=APPLY_THREADS, thread_name_prefix="agent-apply")
        # The containers' system metrics the agents sample (issue 46).
        self._system_metrics = SystemMetricsStore(ctx)
        # Which streams' agents went silent: one watch for them all.
        self._silence = SilenceWatch(ctx)

    def Enrol(self, request: apb.EnrolRequest, context: grpc.ServicerContext) -> apb.EnrolResponse:
        means = request.WhichOneof("means")
        try:
            # Not idempotent (a token is used once): an outage before the commit is ridden out,
            # one in doubt is answered UNAVAILABLE and the agent asks again.
            enrolment = ride_out(
                lambda: agent_credentials.enrol(
                    self.ctx,
                    request.agent_id,
                    join_token=request.join_token if means == "join_token" else "",
                    enrolment_secret=request.enrolment_secret if means == "enrolment_secret" else "",
                ),
                what="enrolling an agent",
                stopping=self.ctx.stopping,
            )
        except DomainError as exc:
            log.warning("agent enrolment refused", agent_id=request.agent_id[:64], error=str(exc))
            abort_with(context, exc)
        log.info("agent enrolled", agent_id=enrolment.agent_id, replaced=enrolment.replaced, means=means)
        return apb.EnrolResponse(agent_id=enrolment.agent_id, credential=enrolment.credential)

    async def Connect(
        self, request_iterator: AsyncIterator[apb.AgentMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[apb.MasterMessage]:
        if not self._agent_slots.acquire(blocking=False):
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this master already serves {self.max_agents} agents (its --max-agents): retry later",
            )
        try:
            async for message in self._session(request_iterator, context):
                yield message
        finally:
            self._agent_slots.release()

    async def _blocking(self, fn: Callable[[], T]) -> T:
        """`fn` (database work) in the stream's thread pool, not on the loop every stream shares."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, fn)

    async def _session(
        self, request_iterator: AsyncIterator[apb.AgentMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[apb.MasterMessage]:
        messages = aiter(request_iterator)
        try:
            first = await anext(messages)
        except StopAsyncIteration:
            return
        if first.WhichOneof("msg") != "hello":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "the first message on the stream must be a hello"
            )
        hello = first.hello
        principal = current_principal()
        try:
            await self._blocking(partial(self._check_speaks_as, principal, hello.agent_id))
        except DomainError as exc:
            await abort_with_async(context, exc)
        try:
            # Registering again is harmless (the agent's hello is applied as a whole).
            registration = await self._blocking(
                lambda: ride_out(
                    lambda: agent_registry.register(self.ctx, hello),
                    what="registering an agent",
                    idempotent=True,
                    stopping=self.ctx.stopping,
                )
            )
        except DomainError as exc:
            await abort_with_async(context, exc)
        agent_id = hello.agent_id
        link = self.ctx.hub.attach(agent_id)
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the master has stopped
                loop.call_soon_threadsafe(ready.set)

        link.wake = wake
        # The agent hung up: wake the sender. (The stubs type the callback oddly.)
        context.add_done_callback(cast(Any, lambda _call: link.close()))
        reader: asyncio.Task[None] | None = None
        try:
            try:
                # Again, now that the stream is attached: a revocation that committed between the
                # first check and the attach found no stream to close, and is caught here.
                await self._blocking(partial(self._check_speaks_as, principal, agent_id))
            except DomainError as exc:
                await abort_with_async(context, exc)
            yield apb.MasterMessage(
                welcome=apb.Welcome(
                    master_id=self.ctx.master_id,
                    cluster_id=self.ctx.cluster_id,
                    heartbeat_interval_ms=self.ctx.settings.agent_heartbeat_interval_ms,
                    keep_container_ids=registration.keep_container_ids,
                    acked_seq=registration.acked_seq,
                    master_http_port=self.ctx.settings.http_port,
                )
            )
            for message in self.ctx.hub.take_backlog(agent_id):
                yield message
            reader = asyncio.create_task(self._read(link, messages), name=f"agent-{agent_id}-reader")
            async for message in self._send(link, ready):
                yield message
            if link.refusal is not None:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, link.refusal)
        finally:
            if reader is not None:
                reader.cancel()
            if self.ctx.hub.detach(link):
                # Not awaited: the stream is over, and the row is only a display flag.
                loop.run_in_executor(self._threads, self._mark_disconnected, agent_id)

    def _check_speaks_as(self, principal: Principal | None, agent_id: str) -> None:
        if principal is None:
            return  # a master without the interceptor (in-process tests of the stream)

        def check() -> None:
            with self.ctx.db.read() as s:
                agent_credentials.check_may_speak_as(s, principal, agent_id)

        ride_out(check, what="checking who an agent is", stopping=self.ctx.stopping)

    def _mark_disconnected(self, agent_id: str) -> None:
        try:
            agent_registry.mark_disconnected(self.ctx, agent_id)
        except DatabaseUnavailable as exc:
            # Only a display flag: the agent's next hello sets it again, and liveness goes by the
            # hub's links, not by this row.
            log.warning("could not record an agent's disconnection", agent_id=agent_id, error=str(exc))

    async def _send(self, link: AgentLink, ready: asyncio.Event) -> AsyncIterator[apb.MasterMessage]:
        """What the master queues for the agent, until the stream closes. The sender sleeps until
        a message comes (link.put wakes it) or the silence watch finds the agent silent (it wakes
        it too). Everything else that ends a stream wakes it (link.close: the reader's end, a
        replaced or refused stream, the master's stop; the RPC's own end through its callback)."""
        watched = self._silence.watch(link, ready)
        try:
            while not link.closed.is_set() and not self.ctx.stopping.is_set():
                if self._silence.silent(link):
                    log.warning("agent silent for too long; closing its stream", agent_id=link.agent_id)
                    return
                try:
                    message = link.outbox.get_nowait()
                except queue.Empty:
                    ready.clear()
                    if not link.outbox.empty():
                        continue  # put between the look and the clear: its wake-up may be lost
                    # No timer of its own: a thousand senders each arming one at every wake-up
                    # were a tenth of the loop's time at 500 starts a second (bench/README.md).
                    await ready.wait()
                    continue
                if message is None:
                    return
                yield message
        finally:
            self._silence.forget(watched)

    async def _read(self, link: AgentLink, messages: AsyncIterator[apb.AgentMessage]) -> None:
        """Apply what the agent sends, in order. A heartbeat is a timestamp on the loop, a
        command's ok an entry in the hub; state changes, refused starts and log batches are handed
        on as they are read, in flight while a thread for each kind commits many agents' readers'
        together (agent_reports.py); every other message waits until those are stored, then is
        applied in the stream's thread pool."""
        agent_id = link.agent_id
        reports = ReportPipeline(link, self._units, self._report_writer, self.ctx.stopping)
        try:
            async for message in messages:
                link.heard()
                kind = message.WhichOneof("msg")
                if kind == "heartbeat":
                    continue
                if kind == "container_state":
                    change = message.container_state
                    await reports.submit(
                        "a container state change",
                        partial(containers.on_container_state, self.ctx, message=change),
                        containers.ReportKey(
                            change.container_id, ends=change.state == apb.CONTAINER_STATE_TERMINATED
                        ),
                        # Once stored the agent may forget it (and retire a finished container).
                        ack=(change.container_id, change.seq) if change.seq else None,
                        containers=(change.container_id,),
                    )
                    continue
                if kind == "log_batch":
                    batch = message.log_batch
                    await reports.submit_logs(
                        "a log batch",
                        partial(self.logs.submit_async, agent_id, batch, self._log_writer),
                        containers={entry.container_id for entry in batch.entries},
                    )
                    continue
                if kind == "ack" and message.ack.ok:
                    self.ctx.hub.acknowledged(message.ack.command_id)
                    continue
                await reports.settle()
                if kind == "ack":
                    started = self.ctx.hub.acknowledged(message.ack.command_id)
                    if not message.ack.ok:
                        log.warning("agent refused a command", agent_id=agent_id, error=message.ack.error)
                        stopping = message.ack.agent_stopping
                        if stopping:
                            # Nothing more is placed on it until it comes back (a new stream).
                            self.ctx.hub.mark_stopping(agent_id)
                        if started is not None:
                            error = message.ack.error
                            await reports.submit(
                                "a refused start",
                                partial(
                                    _start_refused,
                                    self.ctx,
                                    container_id=started,
                                    error=error,
                                    stopping=stopping,
                                ),
                                containers.ReportKey(started, ends=True),
                                ack=None,
                                containers=(started,),
                            )
                elif kind == "slot_report":
                    report = message.slot_report
                    await self._apply(
                        link,
                        "a slot report",
                        partial(agent_registry.update_slots, self.ctx, agent_id, report),
                    )
                elif kind == "system_metrics":
                    sampled = message.system_metrics
                    await self._report(link, partial(self._system_metrics_batch, agent_id, sampled))
                elif kind == "hello":
                    log.warning("second hello on one stream; closing it", agent_id=agent_id)
                    break
            else:
                # The agent half-closed: what it reported is stored and acknowledged before the end.
                await reports.settle()
        except (grpc.RpcError, asyncio.CancelledError, StreamEnded):
            pass  # the agent went away, or the stream ended first; the stream's end says the rest
        except DatabaseUnavailable as exc:
            # The outage outlasted the ride-out. Closing the stream loses nothing: the agent keeps
            # what the master has not acknowledged and sends it again when it reconnects.
            log.warning("database unavailable; closing an agent's stream", agent_id=agent_id, error=str(exc))
        except Exception:
            log.exception("failed handling a message from an agent; closing its stream", agent_id=agent_id)
        finally:
            reports.close()
            link.close()

    async def _apply(self, link: AgentLink, what: str, apply: Callable[[], T]) -> T:
        """Apply one message from an agent, riding out a database outage. Applying a message twice
        applies it once (state changes and log lines carry per-container sequence numbers), so
        even a commit in doubt is tried again. While it applies, and while it waits out an outage,
        the agent counts as heard: it is the master that is not listening."""

        # The same while the transaction waits its turn: at 1,000 agents the state changes of a
        # full cluster's starts queue for the database for longer than the heartbeat timeout, and
        # the agents, heard all along, were cut off (bench/sim_agents.py).
        with link.master_behind():
            return await self._blocking(
                lambda: ride_out(
                    apply, what=what, idempotent=True, stopping=self.ctx.stopping, waiting=link.heard
                )
            )

    async def _report(self, link: AgentLink, store: Callable[[], None]) -> None:
        """Store a report the agent sent and forgot (system metrics): while it is stored the agent
        counts as heard (the master is the one behind, as in _apply), and nothing it raises ends
        the stream."""
        with link.master_behind():
            await self._blocking(store)

    def _system_metrics_batch(self, agent_id: str, batch: apb.SystemMetrics) -> None:
        """Store a batch of system metrics. A refused batch, or one the database cannot take now,
        is dropped with a warning and the stream goes on: the series gets a gap, nothing else."""
        try:
            self._system_metrics.store(agent_id, batch)
        except InvalidArgument as exc:
            log.warning("system metrics batch refused", agent_id=agent_id, error=str(exc))
        except DatabaseUnavailable as exc:
            log.warning("system metrics batch dropped: no database", agent_id=agent_id, error=str(exc))
        except Exception:
            # A fault of the store's (a lock that stayed taken, a value the driver would not take)
            # costs this batch, not the agent's stream.
            log.exception("system metrics batch dropped: storing it failed", agent_id=agent_id)

    def FetchTaskContext(
        self, request: apb.FetchTaskContextRequest, context: grpc.ServicerContext
    ) -> Iterator[apb.FetchTaskContextChunk]:
        principal = current_principal()
        agent_id = principal.agent_id if principal is not None else None

        def read_archive() -> bytes | None:
            with self.ctx.db.read() as s:
                if agent_id is not None and not allocation_runs_on(s, request.allocation_id, agent_id):
                    return None  # not this agent's: answered as not found, whether or not it exists
                return task_context_archive(s, request.allocation_id)

        try:
            # Nothing is sent before the archive is read: an outage is ridden out like a call's.
            archive = ride_out(read_archive, what="FetchTaskContext", stopping=self.ctx.stopping)
        except DatabaseUnavailable as exc:
            abort_with(context, exc)
        if archive is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no live allocation {request.allocation_id}")
        for start in range(0, len(archive), CONTEXT_CHUNK):
            yield apb.FetchTaskContextChunk(data=archive[start : start + CONTEXT_CHUNK])


def _start_refused(ctx: MasterContext, w: Work, *, container_id: str, error: str, stopping: bool) -> None:
    containers.start_refused(ctx, w, container_id, error, agent_stopping=stopping)
