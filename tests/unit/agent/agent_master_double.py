"""A master for the agent to talk to in tests: a real AgentService gRPC server on a real port.

It records every message the agent sends, stores log lines and state changes by (container, seq)
the way the master does (each once), acknowledges them, and lets the test send commands. What it
"stored" lives in a MasterStore that outlives the server, so a test can stop the server and start a
new one on the same port as a restarted master.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field

import grpc

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc
from services.common.metadata import AGENT_CREDENTIAL_KEY, CLUSTER_TOKEN_KEY


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@dataclass
class MasterStore:
    """What the master has stored; survives a restart of the double."""

    logs: dict[tuple[str, int], apb.LogEntry] = field(default_factory=dict)
    states: dict[tuple[str, int], apb.ContainerStateChanged] = field(default_factory=dict)
    # Every (container, seq) as received, duplicates included.
    received: Counter[tuple[str, int]] = field(default_factory=Counter)
    acked: dict[str, int] = field(default_factory=dict)
    contexts: dict[str, bytes] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def lines(self, container_id: str, source: str | None = "task") -> list[apb.LogEntry]:
        with self.lock:
            entries = [e for (c, _), e in self.logs.items() if c == container_id]
        entries.sort(key=lambda e: e.seq)
        return [e for e in entries if source is None or e.source == source]

    def messages(self, container_id: str) -> list[str]:
        return [e.message for e in self.lines(container_id)]

    def state_changes(self, container_id: str) -> list[apb.ContainerStateChanged]:
        with self.lock:
            found = [s for (c, _), s in self.states.items() if c == container_id]
        return sorted(found, key=lambda s: s.seq)

    def states_of(self, container_id: str) -> list[str]:
        changes = self.state_changes(container_id)
        return [apb.ContainerState.Name(s.state).removeprefix("CONTAINER_STATE_") for s in changes]

    def final(self, container_id: str) -> apb.ContainerStateChanged | None:
        for change in self.state_changes(container_id):
            if change.state == apb.CONTAINER_STATE_TERMINATED:
                return change
        return None

    def all_seqs(self, container_id: str) -> list[int]:
        with self.lock:
            keys = [*self.logs, *self.states]
        return sorted(s for (c, s) in keys if c == container_id)


@dataclass
class StreamLog:
    hello: apb.Hello
    metadata: dict[str, str]
    messages: list[apb.AgentMessage] = field(default_factory=list)
    outbox: queue.Queue[apb.MasterMessage | None] = field(default_factory=queue.Queue)
    ended: threading.Event = field(default_factory=threading.Event)
    # Set by shut_out: the stream ends with PERMISSION_DENIED saying this (a revocation).
    refusal: str | None = None

    def of_kind(self, kind: str) -> list[apb.AgentMessage]:
        return [m for m in list(self.messages) if m.WhichOneof("msg") == kind]


class MasterDouble(agent_pb2_grpc.AgentServiceServicer):
    def __init__(
        self,
        store: MasterStore,
        *,
        heartbeat_interval_ms: int = 200,
        ack: bool = True,
        keep: Callable[[apb.Hello], list[str]] | None = None,
        http_port: int = 18080,
        cluster_id: str = "cluster-test",
        expected_token: str | None = None,
        refuse: tuple[grpc.StatusCode, str] | None = None,
        fetch_delay: float = 0.0,
    ) -> None:
        self.store = store
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # Whether stored lines and state changes are acknowledged (LogAck).
        self.ack = ack
        self.keep = keep or (lambda hello: [c.container_id for c in hello.containers])
        self.http_port = http_port
        self.cluster_id = cluster_id
        self.expected_token = expected_token
        # Answer every Connect with this error instead of a Welcome.
        self.refuse = refuse
        self.fetch_delay = fetch_delay
        self.refusals = 0
        # Agents' own credentials, as the master keeps them: one-time join tokens (Enrol takes each
        # once), the credential issued for each agent id, and the ids shut out. With any join token
        # set, Connect and FetchTaskContext take an issued credential and nothing else.
        self.join_tokens: set[str] = set()
        self.issued: dict[str, str] = {}
        self.revoked: set[str] = set()
        self.enrolments: list[apb.EnrolRequest] = []
        self.streams: list[StreamLog] = []
        self.fetches: list[str] = []
        self._lock = threading.Lock()

    # -- the test's side ----------------------------------------------------------------------------
    @property
    def current(self) -> StreamLog:
        with self._lock:
            assert self.streams, "no agent connected"
            return self.streams[-1]

    def wait_connected(self, count: int = 1, timeout: float = 15.0) -> StreamLog:
        wait_until(lambda: len(self.streams) >= count, timeout, f"{count} agent stream(s)")
        return self.current

    def send(self, message: apb.MasterMessage) -> None:
        self.current.outbox.put(message)

    def start(
        self,
        container_id: str,
        entrypoint: list[str],
        *,
        shell: bool = False,
        slot_ids: list[str] | None = None,
        env: dict[str, str] | None = None,
        has_context: bool = False,
        grace: int = 1,
        command_id: str | None = None,
        container_config: str = "",
        after: list[str] | None = None,
        context_digest: str = "",
        run_as: apb.RunAs | None = None,
    ) -> None:
        self.send(
            apb.MasterMessage(
                start=apb.StartContainer(
                    command_id=command_id or f"start-{container_id}",
                    container_id=container_id,
                    allocation_id=f"alloc-{container_id}",
                    slot_ids=slot_ids or [],
                    spec=apb.TaskSpec(
                        entrypoint=entrypoint,
                        shell=shell,
                        environment=env or {},
                        runtime="process",
                        kill_grace_seconds=grace,
                        has_context=has_context,
                        description=f"test {container_id}",
                        container_config=container_config,
                        context_digest=context_digest,
                        run_as=run_as,
                    ),
                    after_container_ids=after or [],
                )
            )
        )

    def shut_out(self, reason: str) -> None:
        """Revoke the connected agent: its stream ends with PERMISSION_DENIED naming `reason`."""
        stream = self.current
        self.revoked.add(stream.hello.agent_id)
        stream.refusal = reason
        stream.outbox.put(None)

    def acks(self) -> dict[str, apb.CommandAck]:
        result: dict[str, apb.CommandAck] = {}
        for stream in list(self.streams):
            for message in stream.of_kind("ack"):
                result[message.ack.command_id] = message.ack
        return result

    # -- AgentService ----------------------------------------------------------------------------
    def Connect(
        self, request_iterator: Iterator[apb.AgentMessage], context: grpc.ServicerContext
    ) -> Iterator[apb.MasterMessage]:
        self._check_token(context)
        if self.refuse is not None:
            self.refusals += 1
            context.abort(*self.refuse)
        first = next(request_iterator)
        assert first.WhichOneof("msg") == "hello", "the first message must be a hello"
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        stream = StreamLog(hello=first.hello, metadata=metadata)
        stream.messages.append(first)
        with self._lock:
            self.streams.append(stream)
        keep = self.keep(first.hello)
        with self.store.lock:
            acked = {c: self.store.acked.get(c, 0) for c in keep}
        yield apb.MasterMessage(
            welcome=apb.Welcome(
                master_id="master-test",
                cluster_id=self.cluster_id,
                heartbeat_interval_ms=self.heartbeat_interval_ms,
                keep_container_ids=keep,
                acked_seq=acked,
                master_http_port=self.http_port,
            )
        )
        reader = threading.Thread(target=self._read, args=(stream, request_iterator), daemon=True)
        reader.start()
        while context.is_active():
            try:
                message = stream.outbox.get(timeout=0.05)
            except queue.Empty:
                continue
            if message is None:
                break
            yield message
        stream.ended.set()
        if stream.refusal is not None:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, stream.refusal)

    def Enrol(self, request: apb.EnrolRequest, context: grpc.ServicerContext) -> apb.EnrolResponse:
        self.enrolments.append(request)
        if request.join_token not in self.join_tokens:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "join token: used already or not made here")
        self.join_tokens.discard(request.join_token)
        credential = f"credential-{request.agent_id}-{len(self.enrolments)}"
        self.issued[credential] = request.agent_id
        return apb.EnrolResponse(agent_id=request.agent_id, credential=credential)

    def _check_token(self, context: grpc.ServicerContext) -> None:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        if self.join_tokens or self.issued:
            agent_id = self.issued.get(metadata.get(AGENT_CREDENTIAL_KEY, ""))
            if agent_id is None:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "agent credential: not one this master issued")
            if agent_id in self.revoked:
                context.abort(grpc.StatusCode.PERMISSION_DENIED, f"agent {agent_id} was revoked")
            return
        if self.expected_token is None:
            return
        if metadata.get(CLUSTER_TOKEN_KEY) != self.expected_token:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong cluster token")

    def _read(self, stream: StreamLog, messages: Iterator[apb.AgentMessage]) -> None:
        try:
            for message in messages:
                stream.messages.append(message)
                kind = message.WhichOneof("msg")
                highest: dict[str, int] = defaultdict(int)
                if kind == "log_batch":
                    with self.store.lock:
                        for entry in message.log_batch.entries:
                            key = (entry.container_id, entry.seq)
                            self.store.received[key] += 1
                            self.store.logs.setdefault(key, entry)
                            highest[entry.container_id] = max(highest[entry.container_id], entry.seq)
                elif kind == "container_state":
                    change = message.container_state
                    key = (change.container_id, change.seq)
                    with self.store.lock:
                        self.store.received[key] += 1
                        self.store.states.setdefault(key, change)
                    highest[change.container_id] = change.seq
                if highest and self.ack:
                    with self.store.lock:
                        for container_id, seq in highest.items():
                            self.store.acked[container_id] = max(self.store.acked.get(container_id, 0), seq)
                    stream.outbox.put(apb.MasterMessage(log_ack=apb.LogAck(acked_seq=dict(highest))))
        except grpc.RpcError:
            pass
        finally:
            stream.outbox.put(None)

    def FetchTaskContext(
        self, request: apb.FetchTaskContextRequest, context: grpc.ServicerContext
    ) -> Iterator[apb.FetchTaskContextChunk]:
        self._check_token(context)
        self.fetches.append(request.allocation_id)
        if self.fetch_delay:
            time.sleep(self.fetch_delay)
        archive = self.store.contexts.get(request.allocation_id)
        if archive is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no live allocation {request.allocation_id}")
        for start in range(0, len(archive), 1000):
            yield apb.FetchTaskContextChunk(data=archive[start : start + 1000])


class MasterServer:
    """Runs a MasterDouble on a port; restartable on the same port."""

    def __init__(self, store: MasterStore, port: int = 0, **double_options: object) -> None:
        self.store = store
        self.double = MasterDouble(store, **double_options)  # type: ignore[arg-type]
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        agent_pb2_grpc.add_AgentServiceServicer_to_server(self.double, self._server)
        self.port = self._server.add_insecure_port(f"127.0.0.1:{port}")
        assert self.port, f"cannot bind 127.0.0.1:{port}"
        self._server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.stop(0).wait(5)
