"""Agents' streams, held here and carried to the master in batches on one call.

An agent speaks AgentService to the relay as it would to the master (its address is the relay's):
each Connect stream here becomes a numbered stream inside one AgentRelay.Relay call to the master
(proto/cairn/agent/v1/relay.proto). What the agents send is gathered while the previous batch is
written, so under load one RelayUp carries many agents' messages, and the master's answers come
back the same way. The master checks each stream's credential and serves it with the code that
serves a direct stream; the relay only carries. Enrol and FetchTaskContext are passed through to
the master as single calls, with the agent's metadata.

When the call to the master ends (the master restarted, a standby took over), every stream here
ends UNAVAILABLE, as a broken connection would end it, and the agents reconnect with their usual
backoff while the relay dials the master again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

import grpc
import grpc.aio

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import agent_pb2_grpc, relay_pb2_grpc
from cairn.agent.v1 import relay_pb2 as rpb
from cairn.metadata_keys import AGENT_CREDENTIAL_KEY, CLUSTER_TOKEN_KEY
from services.common.logging import get_logger

log = get_logger(__name__)

# The metadata of an agent's stream the master's authentication reads (agent_auth.py).
FORWARDED_KEYS = (AGENT_CREDENTIAL_KEY, CLUSTER_TOKEN_KEY)
MAX_FRAMES_PER_BATCH = 512
# Agents' messages read and not yet written to the master: past this, the agents' streams are not
# read until the master takes them (gRPC's flow control then holds the agents back).
MAX_PENDING_FRAMES = 20_000
REDIAL_S = (0.2, 0.5, 1.0, 2.0, 5.0)


class _Ended:
    """The master ended a stream with a status (or the relay lost the master)."""

    __slots__ = ("code", "details")

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self.code = code
        self.details = details


_CODES = {code.value[0]: code for code in grpc.StatusCode}


class Upstream:
    """One Relay call to the master and the streams it carries."""

    def __init__(self) -> None:
        self._frames: list[rpb.UpFrame] = []
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._numbers = itertools.count(1)
        self.streams: dict[int, asyncio.Queue[apb.MasterMessage | _Ended]] = {}
        self.open = True

    def _push(self, frame: rpb.UpFrame) -> None:
        self._frames.append(frame)
        self._ready.set()
        if len(self._frames) >= MAX_PENDING_FRAMES:
            self._room.clear()

    async def room(self) -> None:
        await self._room.wait()

    def opened(
        self, metadata: dict[str, str], peer: str
    ) -> tuple[int, asyncio.Queue[apb.MasterMessage | _Ended]]:
        number = next(self._numbers)
        queue: asyncio.Queue[apb.MasterMessage | _Ended] = asyncio.Queue()
        self.streams[number] = queue
        self._push(rpb.UpFrame(stream=number, opened=rpb.StreamOpened(metadata=metadata, peer=peer)))
        return number, queue

    def message(self, number: int, message: apb.AgentMessage) -> None:
        self._push(rpb.UpFrame(stream=number, message=message))

    def closed(self, number: int) -> None:
        if self.streams.pop(number, None) is not None and self.open:
            self._push(rpb.UpFrame(stream=number, closed=rpb.StreamClosed()))

    async def batches(self) -> AsyncIterator[rpb.RelayUp]:
        while self.open:
            if not self._frames:
                self._ready.clear()
                await self._ready.wait()
                continue
            frames = self._frames[:MAX_FRAMES_PER_BATCH]
            del self._frames[:MAX_FRAMES_PER_BATCH]
            if len(self._frames) < MAX_PENDING_FRAMES // 2:
                self._room.set()
            yield rpb.RelayUp(frames=frames)

    def deliver(self, batch: rpb.RelayDown) -> None:
        for frame in batch.frames:
            queue = self.streams.get(frame.stream)
            if queue is None:
                continue  # the agent hung up meanwhile
            if frame.WhichOneof("event") == "message":
                queue.put_nowait(frame.message)
            else:
                queue.put_nowait(
                    _Ended(_CODES.get(frame.ended.code, grpc.StatusCode.UNKNOWN), frame.ended.details)
                )

    def lost(self, why: str) -> None:
        """The call to the master is over: every stream it carried ends UNAVAILABLE."""
        self.open = False
        self._ready.set()
        self._room.set()
        for queue in self.streams.values():
            queue.put_nowait(_Ended(grpc.StatusCode.UNAVAILABLE, why))
        self.streams.clear()


class AgentRelay(agent_pb2_grpc.AgentServiceServicer):
    """The agents' side: AgentService, carried to the master."""

    def __init__(self, channel: grpc.aio.Channel, cluster_token: str | None) -> None:
        self._channel = channel
        self._relay = relay_pb2_grpc.AgentRelayStub(channel)
        self._agents = agent_pb2_grpc.AgentServiceStub(channel)
        self._token = cluster_token
        self._upstream: Upstream | None = None
        self.connected = asyncio.Event()

    async def run(self, stopping: asyncio.Event) -> None:
        """Hold a Relay call to the master, dialling again whenever it ends, until `stopping`."""
        failures = 0
        while not stopping.is_set():
            upstream = Upstream()
            metadata = ((CLUSTER_TOKEN_KEY, self._token),) if self._token else ()
            call = self._relay.Relay(upstream.batches(), metadata=metadata)
            why = "the relay lost the master"
            try:
                await call.wait_for_connection()
                self._upstream = upstream
                self.connected.set()
                log.info("relaying to the master")
                async for batch in call:
                    failures = 0
                    upstream.deliver(batch)
            except grpc.aio.AioRpcError as exc:
                why = f"the relay lost the master: {exc.code().name} {exc.details()}"
                log.warning("relay call to the master ended", code=exc.code().name, details=exc.details())
            finally:
                self.connected.clear()
                self._upstream = None
                upstream.lost(why)
                call.cancel()
            delay = REDIAL_S[min(failures, len(REDIAL_S) - 1)]
            failures += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), delay)

    async def Connect(
        self, request_iterator: AsyncIterator[apb.AgentMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[apb.MasterMessage]:
        upstream = self._upstream
        if upstream is None or not upstream.open:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the relay is not connected to the master")
            return
        presented = {
            key: value if isinstance(value, str) else value.decode()
            for key, value in (context.invocation_metadata() or ())
            if key in FORWARDED_KEYS
        }
        number, answers = upstream.opened(presented, context.peer())
        sender = asyncio.create_task(self._carry_up(upstream, number, request_iterator))
        try:
            while True:
                answer = await answers.get()
                if isinstance(answer, _Ended):
                    if answer.code != grpc.StatusCode.OK:
                        await context.abort(answer.code, answer.details)
                    return
                yield answer
        finally:
            sender.cancel()
            upstream.closed(number)

    @staticmethod
    async def _carry_up(upstream: Upstream, number: int, messages: AsyncIterator[apb.AgentMessage]) -> None:
        try:
            async for message in messages:
                upstream.message(number, message)
                await upstream.room()
        except (grpc.RpcError, asyncio.CancelledError):
            return
        upstream.closed(number)

    async def Enrol(self, request: apb.EnrolRequest, context: grpc.aio.ServicerContext) -> apb.EnrolResponse:
        try:
            return await self._agents.Enrol(request, metadata=_passed_on(context))
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), exc.details() or "")
            raise  # not reached: abort raises

    async def FetchTaskContext(
        self, request: apb.FetchTaskContextRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[apb.FetchTaskContextChunk]:
        try:
            async for chunk in self._agents.FetchTaskContext(request, metadata=_passed_on(context)):
                yield chunk
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), exc.details() or "")


def _passed_on(context: grpc.aio.ServicerContext) -> tuple[tuple[str, str], ...]:
    return tuple(
        (key, value if isinstance(value, str) else value.decode())
        for key, value in (context.invocation_metadata() or ())
        if key in FORWARDED_KEYS
    )
