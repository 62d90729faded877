"""The agent's session with the master: one AgentService.Connect stream at a time, reconnecting
with backoff for as long as it takes (or --reconnect-timeout).

Per stream: Hello first; nothing else goes out until the Welcome has been applied (it says what
the master already stored, which decides what is resent). Then, from the request iterator that
gRPC drains on its own thread: command acknowledgements, the outbox's state changes and log
batches in seq order per container, and a heartbeat after heartbeat_interval_ms of silence. This thread reads
the master's messages and hands the commands to the container manager.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc
from services.agent.containers.manager import ContainerManager
from services.agent.containers.outbox import Outbox
from services.agent.containers.task_env import MasterFacts
from services.agent.gpu_health import SlotFault
from services.agent.session import convert
from services.agent.session.backoff import Backoff
from services.agent.session.enrolment import AgentAuth, EnrolmentRefused
from services.agent.session.reconnect_pause import pause_until_reachable
from services.agent.slots import SlotInfo
from services.common.logging import get_logger

log = get_logger(__name__)

DEFAULT_HEARTBEAT_SECONDS = 5.0
# System-metric batches waiting for the sender: a few intervals' worth; older ones are dropped.
MAX_QUEUED_REPORTS = 8
# Errors before the Welcome that retrying will not fix: the agent exits with the master's reason.
REFUSALS = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


@dataclass(frozen=True)
class AgentIdentity:
    agent_id: str
    version: str
    resource_pool: str
    hostname: str
    addresses: tuple[str, ...]
    slots: tuple[SlotInfo, ...]
    boot_time: float
    runtime: str = "process"


class _Stream:
    """One Connect call's worth of state."""

    def __init__(self, hello: apb.Hello) -> None:
        self.hello = hello
        self.closed = threading.Event()
        self.welcomed = threading.Event()
        self.acks: queue.SimpleQueue[apb.AgentMessage] = queue.SimpleQueue()
        self.heartbeat_seconds = DEFAULT_HEARTBEAT_SECONDS
        self.shutdown_reason: str | None = None
        # The outbox epoch of this stream (set once welcomed).
        self.epoch = -1
        # The Connect call (an iterator of responses that can also be cancelled).
        self.call: Any = None


@dataclass(frozen=True)
class _Outcome:
    welcomed: bool = False
    fatal: str | None = None
    # The master shut this agent out (PERMISSION_DENIED: revoked): its work is lost to the master.
    shut_out: bool = False


class MasterSession:
    def __init__(
        self,
        *,
        channel: grpc.Channel,
        master_address: str,
        identity: AgentIdentity,
        manager: ContainerManager,
        outbox: Outbox,
        reconnect_timeout: float,
        on_welcome: Callable[[], None],
        on_fatal: Callable[[str], None],
        master_ca_pem: str = "",
        auth: AgentAuth | None = None,
        on_shut_out: Callable[[str], None] | None = None,
        slot_faults: Callable[[], Mapping[str, SlotFault]] | None = None,
    ) -> None:
        self._channel = channel
        self._stub = agent_pb2_grpc.AgentServiceStub(channel)
        self._master_address = master_address
        # --master-cert: handed to tasks, which verify the master with it too.
        self._master_ca_pem = master_ca_pem
        self._identity = identity
        self._manager = manager
        self._outbox = outbox
        self._reconnect_timeout = reconnect_timeout
        self._on_welcome = on_welcome
        self._on_fatal = on_fatal
        # What the agent presents (enrolment.py); None: whatever the channel carries.
        self._auth = auth
        self._on_shut_out = on_shut_out or on_fatal
        # Enrolled again in this process after the master refused the stored credential: once.
        self._enrolled_again = False
        self._stopping = threading.Event()
        self._stream: _Stream | None = None
        self._welcomed_before = False
        # Set while a stream is up and welcomed.
        self.connected = threading.Event()
        # Each slot's latest device fault (gpu_health.py), sent with the slots in the Hello and in a
        # SlotReport whenever one is new (slots_changed).
        self._slot_faults = slot_faults or dict
        self._slots_changed = threading.Event()
        # Fire-and-forget reports (system metrics) for the stream's sender; none kept while away.
        self._reports: deque[apb.AgentMessage] = deque(maxlen=MAX_QUEUED_REPORTS)

    def send_report(self, message: apb.AgentMessage) -> None:
        """Send `message` on the stream if one is up; otherwise it is dropped (a gap in a series
        is better than an old burst when the master comes back)."""
        if self.connected.is_set():
            self._reports.append(message)
            self._outbox.ready.set()

    def slots_changed(self) -> None:
        """A slot's health changed: the stream's sender reports every slot again, before any
        container's end that follows (a Hello carries them after a reconnect)."""
        self._slots_changed.set()
        self._outbox.ready.set()

    def _slot_messages(self) -> list[apb.Slot]:
        faults = self._slot_faults()
        return [convert.slot_message(s, faults.get(s.id)) for s in self._identity.slots]

    # -- lifecycle -------------------------------------------------------------------------------
    def run(self) -> None:
        backoff = Backoff(initial=0.5, maximum=10.0)
        down_since = time.monotonic()
        while not self._stopping.is_set():
            outcome = self._enrol_if_needed() or self._run_stream()
            if outcome.fatal is not None:
                (self._on_shut_out if outcome.shut_out else self._on_fatal)(outcome.fatal)
                return
            if self._stopping.is_set():
                return
            if outcome.welcomed:
                backoff.reset()
                down_since = time.monotonic()
            if self._reconnect_timeout and time.monotonic() - down_since > self._reconnect_timeout:
                self._on_fatal(
                    f"no session with the master at {self._master_address} for "
                    f"{self._reconnect_timeout:g} s (--reconnect-timeout)"
                )
                return
            delay = backoff.next_delay()
            log.info("reconnecting to the master", master=self._master_address, in_seconds=round(delay, 2))
            if pause_until_reachable(self._channel, delay, self._stopping):
                log.info("the master is reachable again; reconnecting now", master=self._master_address)

    def stop(self, wait_seconds: float = 3.0, thread: threading.Thread | None = None) -> None:
        """End the session: half-close the stream after what is queued, then wait for the master
        to end it (cancel if it does not)."""
        self._stopping.set()
        stream = self._stream
        if stream is not None:
            stream.closed.set()
            self._outbox.ready.set()
        if thread is not None:
            thread.join(wait_seconds)
            # Still running: the master did not end the stream (or a new one was just opening).
            stream = self._stream
            if thread.is_alive() and stream is not None and stream.call is not None:
                stream.call.cancel()
                thread.join(wait_seconds)

    # -- credentials -----------------------------------------------------------------------------
    def _enrol_if_needed(self) -> _Outcome | None:
        """Enrol when there is no credential yet and a way to get one: None to go on to the stream,
        an outcome when enrolling failed (transient: try again after the backoff; refused: fatal)."""
        auth = self._auth
        if auth is None or auth.has_credential or not auth.can_enrol:
            return None
        try:
            auth.enrol(self._stub)
        except EnrolmentRefused as exc:
            return _Outcome(fatal=str(exc))
        except grpc.RpcError as exc:
            log.warning(
                "could not reach the master to enrol", master=self._master_address, details=exc.details()
            )
            return _Outcome()
        return None

    def _refused(self, code: grpc.StatusCode, details: str | None, welcomed: bool) -> _Outcome | None:
        """The master's refusal of this agent as an outcome; None when it is not one."""
        auth = self._auth
        if (
            not welcomed
            and code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
            and auth is not None
            and auth.has_credential
            and auth.can_enrol
            and not self._enrolled_again
        ):
            # The master does not take the stored credential (its database was replaced, or an admin
            # re-admits this revoked agent with a join token made for it): enrol once more.
            log.warning("the master refused this agent's credential; enrolling again", details=details)
            self._enrolled_again = True
            auth.drop_credential()
            return _Outcome()
        if code == grpc.StatusCode.PERMISSION_DENIED:
            # Revoked (before or during the stream): the master gave up this agent's work and will
            # not take it back. No retrying: an admin must act (README: revocation).
            log.error("the master shut this agent out", details=details)
            return _Outcome(
                welcomed=welcomed, fatal=f"the master shut this agent out: {details}", shut_out=True
            )
        if not welcomed and code in REFUSALS:
            return _Outcome(fatal=f"the master refused the agent ({code.name}): {details}")
        return None

    # -- one stream ------------------------------------------------------------------------------
    def _hello(self) -> apb.Hello:
        ident = self._identity
        return apb.Hello(
            agent_id=ident.agent_id,
            version=ident.version,
            resource_pool=ident.resource_pool,
            hostname=ident.hostname,
            addresses=list(ident.addresses),
            slots=self._slot_messages(),
            containers=[convert.running_container(r) for r in self._manager.hello_containers()],
            reconnect=self._welcomed_before,
            runtime=ident.runtime,
            boot_time=convert.timestamp(ident.boot_time),
        )

    def _run_stream(self) -> _Outcome:
        stream = _Stream(self._hello())
        self._stream = stream
        welcomed = False
        try:
            call = self._stub.Connect(self._outgoing(stream))
            stream.call = call
            for message in call:
                if not welcomed:
                    if message.WhichOneof("msg") != "welcome":
                        log.warning("the master's first message is not a welcome; reconnecting")
                        return _Outcome()
                    self._apply_welcome(stream, message.welcome)
                    welcomed = True
                    continue
                self._dispatch(stream, message)
                if stream.shutdown_reason is not None:
                    return _Outcome(
                        welcomed=True, fatal=f"the master shut the agent down: {stream.shutdown_reason}"
                    )
            if not self._stopping.is_set():
                log.warning("the master ended the stream")
        except grpc.RpcError as exc:
            code = exc.code()
            details = exc.details()
            refused = self._refused(code, details, welcomed)
            if refused is not None:
                return refused
            if not self._stopping.is_set():
                log.warning("stream to the master broke", code=code.name if code else None, details=details)
        except Exception:
            # A bug in handling one message must not end the agent: drop the stream and reconnect.
            log.exception("failed handling the master's message; reconnecting")
        finally:
            stream.closed.set()
            self._outbox.ready.set()
            self.connected.clear()
            self._reports.clear()
            if stream.call is not None:
                stream.call.cancel()
            self._stream = None
        return _Outcome(welcomed=welcomed)

    def _outgoing(self, stream: _Stream) -> Iterator[apb.AgentMessage]:
        yield apb.AgentMessage(hello=stream.hello)
        while not stream.welcomed.is_set():
            if stream.closed.wait(0.02):
                return
        heartbeat_seq = 0
        next_heartbeat = time.monotonic() + stream.heartbeat_seconds
        ready = self._outbox.ready
        while not stream.closed.is_set():
            ready.clear()
            sent = False
            while True:
                try:
                    yield stream.acks.get_nowait()
                except queue.Empty:
                    break
                sent = True
            # Taken before the slots are looked at: a container's end blamed on a GPU fault was
            # written after the fault was recorded, so the slot report always goes out before it.
            deliveries = self._outbox.take(stream.epoch)
            if self._slots_changed.is_set():
                self._slots_changed.clear()
                yield apb.AgentMessage(slot_report=apb.SlotReport(slots=self._slot_messages()))
                sent = True
            while self._reports:
                yield self._reports.popleft()
                sent = True
            for delivery in deliveries:
                yield convert.delivery_message(delivery)
            now = time.monotonic()
            if sent or deliveries:
                # Whatever the agent sends tells the master it is alive: a heartbeat is owed only
                # after an interval of silence (a busy agent's stream carries none).
                next_heartbeat = now + stream.heartbeat_seconds
            elif now >= next_heartbeat:
                heartbeat_seq += 1
                yield apb.AgentMessage(
                    heartbeat=apb.Heartbeat(seq=heartbeat_seq, sent_at=convert.timestamp(time.time()))
                )
                next_heartbeat = now + stream.heartbeat_seconds
            if deliveries:
                continue
            ready.wait(max(0.0, min(next_heartbeat - time.monotonic(), 0.5)))
        # Closing: what the acknowledgement queue still holds goes out before the half-close.
        while True:
            try:
                yield stream.acks.get_nowait()
            except queue.Empty:
                return

    def _apply_welcome(self, stream: _Stream, welcome: apb.Welcome) -> None:
        master = MasterFacts(
            grpc_address=self._master_address,
            cluster_id=welcome.cluster_id,
            master_id=welcome.master_id,
            http_port=welcome.master_http_port,
            ca_pem=self._master_ca_pem,
        )
        self._manager.apply_welcome(list(welcome.keep_container_ids), dict(welcome.acked_seq), master)
        stream.epoch = self._outbox.rewind()
        if welcome.heartbeat_interval_ms > 0:
            stream.heartbeat_seconds = welcome.heartbeat_interval_ms / 1000
        log.info(
            "connected to the master",
            master=self._master_address,
            master_id=welcome.master_id,
            reconnect=self._welcomed_before,
            kept=len(welcome.keep_container_ids),
        )
        self._welcomed_before = True
        stream.welcomed.set()
        self.connected.set()
        self._on_welcome()

    def _dispatch(self, stream: _Stream, message: apb.MasterMessage) -> None:
        kind = message.WhichOneof("msg")
        if kind in ("start", "signal", "kill"):
            command = getattr(message, kind)
            try:
                error = self._command(command, kind)
            except Exception as exc:
                log.exception("command failed", kind=kind, container_id=command.container_id)
                error = f"the agent failed to carry out {kind}: {exc}"
            stopping = kind == "start" and error is not None and self._manager.stopping
            self._acknowledge(stream, command.command_id, error, agent_stopping=stopping)
        elif kind == "log_ack":
            self._manager.ack(dict(message.log_ack.acked_seq))
        elif kind == "shutdown":
            stream.shutdown_reason = message.shutdown.reason or "(no reason given)"
        elif kind == "welcome":
            log.warning("ignoring a second welcome on the same stream")

    def _command(self, command: Any, kind: str) -> str | None:
        if kind == "start":
            return self._manager.start(convert.start_request(command))
        if kind == "kill":
            return self._manager.kill(command.container_id, command.grace_seconds, command.reason or None)
        if command.signal == apb.SignalContainer.SIGNAL_TERMINATE:
            return self._manager.signal(command.container_id, terminate=True)
        if command.signal == apb.SignalContainer.SIGNAL_INTERRUPT:
            return self._manager.signal(command.container_id, terminate=False)
        return "signal.signal: required (TERMINATE or INTERRUPT)"

    def _acknowledge(
        self, stream: _Stream, command_id: str, error: str | None, *, agent_stopping: bool = False
    ) -> None:
        if error:
            log.warning("refused a command", command_id=command_id, error=error)
        ack = apb.CommandAck(
            command_id=command_id, ok=error is None, error=error or "", agent_stopping=agent_stopping
        )
        stream.acks.put(apb.AgentMessage(ack=ack))
        self._outbox.ready.set()
