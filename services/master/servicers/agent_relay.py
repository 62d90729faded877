"""AgentRelay: agents' streams carried to the master by a relay process (services/agent_relay/).

The relay holds each agent's Connect stream and sends the master what they all say in batches on
one call (proto/cairn/agent/v1/relay.proto); the master answers in batches the same way. Each
relayed stream is served by the very code that serves a direct one (AgentStreamServicer.Connect):
the same hello checks, registration, sender, reader, silence watch and --max-agents, fed from a
queue instead of a gRPC stream, with a call context (RelayedCall) that carries its end back to the
relay as a frame. What the master's process no longer does per agent is the connection's work:
HTTP/2, each message's read and write through gRPC's machinery, the interceptors' wrappers.

The relay itself is trusted only to carry: it presents the cluster token to open the call, and
every stream it opens passes the master's own interceptors as a direct Connect does, with the
metadata the agent presented and its address as the relay saw it: its credential checked
(agent_auth.py), its opening recorded in the audit trail, its principal the one its handler reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, cast

import grpc

from cairn.agent.v1 import agent_pb2 as apb
from cairn.agent.v1 import relay_pb2 as rpb
from cairn.agent.v1 import relay_pb2_grpc
from services.common.logging import get_logger
from services.master.servicers.agent_stream import AgentStreamServicer

log = get_logger(__name__)

CONNECT_METHOD = "/cairn.agent.v1.AgentService/Connect"
# Frames in one RelayDown: a start carries its task's spec (a few KiB), so a batch stays a few MiB.
MAX_FRAMES_PER_BATCH = 512
# Agents' messages read from the relay and not yet taken by their streams: past this, the master
# stops reading the relay's call, and gRPC's flow control holds the relay back, which stops reading
# its agents (whose own flow control then holds them back), as a direct stream would be held.
MAX_QUEUED_MESSAGES = 20_000


class _CallDetails(grpc.HandlerCallDetails):
    """grpc.HandlerCallDetails of a relayed stream, for the interceptors."""

    def __init__(self, method: str, metadata: tuple[tuple[str, str], ...]) -> None:
        self.method = method
        self.invocation_metadata = metadata


def _resolved(
    handler: grpc.RpcMethodHandler | None,
) -> Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None]:
    """An interceptor's continuation that answers `handler` (the next interceptor's result)."""
    return lambda _details: handler


class StreamAborted(Exception):
    """A relayed stream's handler ended it with a status (RelayedCall.abort)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class RelayedCall:
    """What the interceptors and AgentStreamServicer's stream code use of grpc.aio's
    ServicerContext, for a relayed stream: the agent's metadata and address, abort (which raises,
    as grpc.aio's does, and leaves its status to be read), and done callbacks, run once the stream
    is over, whichever side ended it."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = (), peer: str = "") -> None:
        self._metadata = metadata
        self._peer = peer
        self._callbacks: list[Callable[[Any], None]] = []
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self.done = False

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        self._code, self._details = code, details
        raise StreamAborted(code, details)

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self.done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        for callback in self._callbacks:
            try:
                callback(self)
            except Exception:
                log.exception("a relayed stream's done callback failed")


class _Inbound:
    """The agents' messages taken off the relay's call and not yet by their streams, counted
    across every stream, so that the call's reader waits when they pile up."""

    def __init__(self) -> None:
        self.queued = 0
        self._room = asyncio.Event()
        self._room.set()

    def added(self) -> None:
        self.queued += 1
        if self.queued >= MAX_QUEUED_MESSAGES:
            self._room.clear()

    def taken(self) -> None:
        self.queued -= 1
        if self.queued <= MAX_QUEUED_MESSAGES // 2:
            self._room.set()

    async def room(self) -> None:
        await self._room.wait()


class _Stream:
    """One relayed agent stream on the master: its messages in order, its call context, its task."""

    def __init__(self, number: int, inbound: _Inbound, opened: rpb.StreamOpened) -> None:
        self.number = number
        self.call = RelayedCall(tuple(opened.metadata.items()), opened.peer)
        self._messages: asyncio.Queue[apb.AgentMessage | None] = asyncio.Queue()
        self._inbound = inbound
        self.task: asyncio.Task[None] | None = None

    def put(self, message: apb.AgentMessage) -> None:
        self._inbound.added()
        self._messages.put_nowait(message)

    def close(self) -> None:
        self._messages.put_nowait(None)

    async def messages(self) -> AsyncIterator[apb.AgentMessage]:
        while True:
            message = await self._messages.get()
            if message is None:
                return
            self._inbound.taken()
            yield message

    def forget(self) -> None:
        """The stream is over: what is still queued is no longer anyone's."""
        while True:
            try:
                message = self._messages.get_nowait()
            except asyncio.QueueEmpty:
                return
            if message is not None:
                self._inbound.taken()


class _Outbound:
    """The frames for the relay, gathered while the previous batch is written: under load one
    batch carries what many streams sent in the meantime."""

    def __init__(self) -> None:
        self._frames: list[rpb.DownFrame] = []
        self._ready = asyncio.Event()
        self._closed = False

    def message(self, stream: int, message: apb.MasterMessage) -> None:
        self._frames.append(rpb.DownFrame(stream=stream, message=message))
        self._ready.set()

    def ended(self, stream: int, code: grpc.StatusCode, details: str) -> None:
        self._frames.append(
            rpb.DownFrame(stream=stream, ended=rpb.StreamEnded(code=code.value[0], details=details))
        )
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    async def batches(self) -> AsyncIterator[rpb.RelayDown]:
        while True:
            if not self._frames:
                if self._closed:
                    return
                self._ready.clear()
                await self._ready.wait()
                continue
            frames = self._frames[:MAX_FRAMES_PER_BATCH]
            del self._frames[:MAX_FRAMES_PER_BATCH]
            yield rpb.RelayDown(frames=frames)


class AgentRelayServicer(relay_pb2_grpc.AgentRelayServicer):
    def __init__(self, streams: AgentStreamServicer, interceptors: Sequence[grpc.ServerInterceptor]) -> None:
        self._streams = streams
        # The master's server interceptors (the audit trail's, then authentication), in the order
        # the server applies them.
        self._interceptors = tuple(interceptors)

    async def Relay(
        self, request_iterator: AsyncIterator[rpb.RelayUp], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rpb.RelayDown]:
        outbound = _Outbound()
        inbound = _Inbound()
        streams: dict[int, _Stream] = {}
        log.info("an agent relay connected", peer=context.peer())
        reader = asyncio.create_task(
            self._read(request_iterator, streams, inbound, outbound), name="relay-reader"
        )
        reader.add_done_callback(lambda _task: outbound.close())
        try:
            async for batch in outbound.batches():
                yield batch
        finally:
            reader.cancel()
            # The relay is gone: every stream it carried ends (its agents reconnect, to it or to
            # another relay), as a direct stream ends when its connection breaks.
            for stream in list(streams.values()):
                self._hang_up(stream)
            tasks = [s.task for s in streams.values() if s.task is not None]
            streams.clear()
            for task in tasks:
                task.cancel()
            log.info("an agent relay disconnected", streams=len(tasks))

    async def _read(
        self,
        request_iterator: AsyncIterator[rpb.RelayUp],
        streams: dict[int, _Stream],
        inbound: _Inbound,
        outbound: _Outbound,
    ) -> None:
        try:
            async for batch in request_iterator:
                for frame in batch.frames:
                    event = frame.WhichOneof("event")
                    if event == "message":
                        stream = streams.get(frame.stream)
                        if stream is not None:  # a stream the master already ended: dropped
                            stream.put(frame.message)
                    elif event == "opened":
                        if frame.stream in streams:
                            log.warning(
                                "a relay reopened a stream it holds; ending both", stream=frame.stream
                            )
                            self._hang_up(streams.pop(frame.stream))
                            continue
                        stream = _Stream(frame.stream, inbound, frame.opened)
                        streams[frame.stream] = stream
                        stream.task = asyncio.create_task(
                            self._serve(stream, outbound, streams), name=f"relayed-{frame.stream}"
                        )
                    elif event == "closed":
                        closed = streams.pop(frame.stream, None)
                        if closed is not None:
                            self._hang_up(closed)
                await inbound.room()
        except (grpc.RpcError, asyncio.CancelledError):
            pass  # the relay went away; Relay's end ends its streams

    @staticmethod
    def _hang_up(stream: _Stream) -> None:
        """The agent's side is over: its reader sees the end of its messages, its sender wakes."""
        stream.close()
        stream.call.finish()

    def _connect_handler(self, call: RelayedCall) -> Callable[..., AsyncIterator[apb.MasterMessage]]:
        """AgentService.Connect as the master's server runs it for a direct stream: wrapped by each
        interceptor, the outermost first (the stream's metadata differs per stream, so per stream)."""
        details = _CallDetails(CONNECT_METHOD, call.invocation_metadata())
        handler: grpc.RpcMethodHandler | None = grpc.stream_stream_rpc_method_handler(self._streams.Connect)
        for interceptor in reversed(self._interceptors):
            handler = interceptor.intercept_service(_resolved(handler), details)
        assert handler is not None and handler.stream_stream is not None
        return cast(Callable[..., AsyncIterator[apb.MasterMessage]], handler.stream_stream)

    async def _serve(self, stream: _Stream, outbound: _Outbound, streams: dict[int, _Stream]) -> None:
        number = stream.number
        try:
            connect = self._connect_handler(stream.call)
            async for message in connect(stream.messages(), stream.call):
                outbound.message(number, message)
            outbound.ended(number, grpc.StatusCode.OK, "")
        except StreamAborted as exc:
            outbound.ended(number, exc.code, exc.details)
        except asyncio.CancelledError:
            pass  # the relay's call ended: nobody is left to tell
        except Exception:
            log.exception("a relayed agent stream failed", stream=number)
            outbound.ended(number, grpc.StatusCode.INTERNAL, "the master failed serving this stream")
        finally:
            stream.call.finish()
            stream.forget()
            if streams.get(number) is stream:
                del streams[number]
