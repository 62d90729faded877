"""AgentService: the bidirectional stream each agent holds with the master, and task contexts.

Per agent stream, one reader thread applies what the agent sends, in order; the RPC's own thread
sends what the master queues for the agent (Welcome first, then any backlog, then new commands).
That thread is held for as long as the agent is connected, so the server's pool has one per agent
slot beside the ordinary calls' (app.py); an agent past the last slot is refused at once with
RESOURCE_EXHAUSTED (it retries with backoff) instead of waiting for a thread with every call behind
it.

What an agent reports of its containers (state changes, refused starts) is applied in units of work
shared with the other agents' reports of the same moment (kernel/batched_units.py): one transaction
for a burst from many agents, each agent's messages still applied in its order and acknowledged only
once stored.

Who the agent is was established by the interceptor (agent_auth.py); here every hello and every
context download is checked against it: an agent known by its credential speaks only as the id the
credential was issued to, and downloads only the model definitions of its own allocations. A stream
the master shuts out (agent_hub.refuse: a revocation) ends with PERMISSION_DENIED naming why.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import TypeVar

import grpc

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc
from services.common.interceptors import current_principal
from services.common.logging import get_logger
from services.common.principal import Principal
from services.common.status import abort_with
from services.master.domain import wiring
from services.master.domain.allocations import containers
from services.master.domain.identity import agent_credentials
from services.master.domain.kernel.batched_units import BatchedUnits
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import DatabaseUnavailable, DomainError
from services.master.domain.kernel.outage import ride_out
from services.master.domain.metrics.logs import LogStore
from services.master.domain.reads.agents import allocation_runs_on
from services.master.domain.reads.tasks import task_context_archive
from services.master.domain.scheduling import agents as agent_registry
from services.master.domain.scheduling.agent_hub import AgentLink

log = get_logger(__name__)

CONTEXT_CHUNK = 1024 * 1024
# The shortest sleep of a stream's sender between looks at whether its agent went silent.
SEND_RECHECK_S = 0.5

T = TypeVar("T")


class AgentStreamServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, ctx: MasterContext, logs: LogStore, max_agents: int) -> None:
        self.ctx = ctx
        self.logs = logs
        self.max_agents = max_agents
        self._agent_slots = threading.BoundedSemaphore(max_agents)
        # The agents' state changes and refused starts, applied in shared transactions.
        self._units = BatchedUnits(ctx, prepare=wiring.preload_agent_reports)

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

    def Connect(
        self, request_iterator: Iterator[apb.AgentMessage], context: grpc.ServicerContext
    ) -> Iterator[apb.MasterMessage]:
        if not self._agent_slots.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this master already serves {self.max_agents} agents (its --max-agents): retry later",
            )
        try:
            yield from self._session(request_iterator, context)
        finally:
            self._agent_slots.release()

    def _session(
        self, request_iterator: Iterator[apb.AgentMessage], context: grpc.ServicerContext
    ) -> Iterator[apb.MasterMessage]:
        try:
            first = next(request_iterator)
        except StopIteration:
            return
        if first.WhichOneof("msg") != "hello":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message on the stream must be a hello")
        hello = first.hello
        principal = current_principal()
        try:
            self._check_speaks_as(principal, hello.agent_id)
        except DomainError as exc:
            abort_with(context, exc)
        try:
            # Registering again is harmless (the agent's hello is applied as a whole).
            registration = ride_out(
                lambda: agent_registry.register(self.ctx, hello),
                what="registering an agent",
                idempotent=True,
                stopping=self.ctx.stopping,
            )
        except DomainError as exc:
            abort_with(context, exc)
        agent_id = hello.agent_id
        link = self.ctx.hub.attach(agent_id)
        context.add_callback(link.close)  # the RPC ended (the agent hung up): wake the sender
        try:
            # Again, now that the stream is attached: a revocation that committed between the first
            # check and the attach found no stream to close, and is caught here.
            self._check_speaks_as(principal, agent_id)
        except DomainError as exc:
            if self.ctx.hub.detach(link):
                self._mark_disconnected(agent_id)
            abort_with(context, exc)
        reader = threading.Thread(
            target=self._read, args=(link, request_iterator), name=f"agent-{agent_id}-reader", daemon=True
        )
        try:
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
            yield from self.ctx.hub.take_backlog(agent_id)
            reader.start()
            yield from self._send(link, context)
            if link.refusal is not None:
                context.abort(grpc.StatusCode.PERMISSION_DENIED, link.refusal)
        finally:
            if self.ctx.hub.detach(link):
                self._mark_disconnected(agent_id)

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

    def _send(self, link: AgentLink, context: grpc.ServicerContext) -> Iterator[apb.MasterMessage]:
        """What the master queues for the agent, until the stream closes. The thread sleeps until a
        message comes or the agent would count as silent, not on a short poll: at a thousand
        agents, two wake-ups a second each were 2,000 thread switches a second on an idle master.
        Everything that ends a stream wakes it (link.close: the reader's end, a replaced or refused
        stream, the master's stop; the RPC's own end through its callback)."""
        timeout = self.ctx.settings.agent_heartbeat_timeout_s
        while not link.closed.is_set() and context.is_active() and not self.ctx.stopping.is_set():
            silent_for = time.monotonic() - link.last_heard
            if silent_for > timeout and not link.applying:
                log.warning("agent silent for too long; closing its stream", agent_id=link.agent_id)
                return
            try:
                # Past the deadline while a message is applied: look again shortly.
                message = link.outbox.get(timeout=max(SEND_RECHECK_S, timeout - silent_for))
            except queue.Empty:
                continue
            if message is None:
                return
            yield message

    def _read(self, link: AgentLink, messages: Iterator[apb.AgentMessage]) -> None:
        agent_id = link.agent_id
        try:
            for message in messages:
                link.last_heard = time.monotonic()
                kind = message.WhichOneof("msg")
                if kind == "heartbeat":
                    continue
                if kind == "container_state":
                    change = message.container_state
                    self._apply(link, "a container state change", partial(self._container_state, change))
                    if change.seq:
                        # Stored: the agent may forget it (and retire a finished container).
                        ack = apb.LogAck(acked_seq={change.container_id: change.seq})
                        link.outbox.put(apb.MasterMessage(log_ack=ack))
                elif kind == "log_batch":
                    batch = message.log_batch
                    acked = self._apply(link, "a log batch", partial(self.logs.store, agent_id, batch))
                    if acked:
                        link.outbox.put(apb.MasterMessage(log_ack=apb.LogAck(acked_seq=acked)))
                elif kind == "ack":
                    started = self.ctx.hub.acknowledged(message.ack.command_id)
                    if not message.ack.ok:
                        log.warning("agent refused a command", agent_id=agent_id, error=message.ack.error)
                        stopping = message.ack.agent_stopping
                        if stopping:
                            # Nothing more is placed on it until it comes back (a new stream).
                            self.ctx.hub.mark_stopping(agent_id)
                        if started is not None:
                            error = message.ack.error
                            self._apply(
                                link,
                                "a refused start",
                                partial(self._start_refused, started, error, stopping),
                            )
                elif kind == "slot_report":
                    report = message.slot_report
                    self._apply(
                        link,
                        "a slot report",
                        partial(agent_registry.update_slots, self.ctx, agent_id, report),
                    )
                elif kind == "hello":
                    log.warning("second hello on one stream; closing it", agent_id=agent_id)
                    break
        except grpc.RpcError:
            pass  # the agent went away; the stream's end says the rest
        except DatabaseUnavailable as exc:
            # The outage outlasted the ride-out. Closing the stream loses nothing: the agent keeps
            # what the master has not acknowledged and sends it again when it reconnects.
            log.warning("database unavailable; closing an agent's stream", agent_id=agent_id, error=str(exc))
        except Exception:
            log.exception("failed handling a message from an agent; closing its stream", agent_id=agent_id)
        finally:
            link.close()

    def _apply(self, link: AgentLink, what: str, apply: Callable[[], T]) -> T:
        """Apply one message from an agent, riding out a database outage. Applying a message twice
        applies it once (state changes and log lines carry per-container sequence numbers), so
        even a commit in doubt is tried again. While it applies, and while it waits out an outage,
        the agent counts as heard: it is the master that is not listening."""

        def still_here() -> None:
            link.last_heard = time.monotonic()

        # The same while the transaction waits its turn: at 1,000 agents the state changes of a
        # full cluster's starts queue for the database for longer than the heartbeat timeout, and
        # the agents, heard all along, were cut off (bench/sim_agents.py).
        link.applying = True
        try:
            return ride_out(apply, what=what, idempotent=True, stopping=self.ctx.stopping, waiting=still_here)
        finally:
            link.applying = False
            still_here()

    def _container_state(self, change: apb.ContainerStateChanged) -> None:
        self._units.run(
            lambda w: containers.on_container_state(self.ctx, w, change),
            key=containers.ReportKey(
                change.container_id, ends=change.state == apb.CONTAINER_STATE_TERMINATED
            ),
        )

    def _start_refused(self, container_id: str, error: str, agent_stopping: bool) -> None:
        self._units.run(
            lambda w: containers.start_refused(
                self.ctx, w, container_id, error, agent_stopping=agent_stopping
            ),
            key=containers.ReportKey(container_id, ends=True),
        )

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
