"""Determined's `/stream` for a websocket a worker process of the public port took: the worker
holds no domain state, so it relays the client's messages to the master's process over the
internal gateway service (proto/cairn/gateway/v1/gateway.proto, `Stream`) and the master's answers
back, and the master's process holds the conversation (domain/streams/session.py), as it does for
a websocket it took itself (stream_socket.py).

- `StreamConversations` (the master's side) runs one conversation in the gRPC call's thread: it
  opens the session with the caller's token (refusing as stream_socket.py does), then answers each
  startup message with its sync and sends the changes the subscription matches as they commit.
  Relayed streams are bounded (MAX_RELAYED_STREAMS: each holds a thread of the gRPC server).
- `RelayedStream` (the worker's side) is the websocket's edge: it checks each client message's
  size, relays it, and sends each answer on, waiting for the socket to drain before it takes the
  next (a slow client holds its stream back; the master drops it once its queue passes the bound).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import grpc

from cairn.gateway.v1 import gateway_pb2
from services.common.logging import get_logger
from services.master.domain.kernel.errors import InvalidArgument, PermissionDenied, Unauthenticated
from services.master.domain.streams.publisher import TooManySubscribers
from services.master.domain.streams.session import Dropped
from services.master.domain.streams.specs import MAX_CLIENT_MESSAGE_BYTES
from services.master.gateway.asgi_websocket import (
    CLOSE_NORMAL,
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    Receive,
    Scope,
    Send,
    refuse_json,
)
from services.master.gateway.proxy_headers import header_message, session_token
from services.master.gateway.stream_socket import (
    MAX_WAITING_STARTUPS,
    SEND_TIMEOUT_S,
    OpenSession,
    cross_origin,
)

log = get_logger(__name__)

# Streams relayed from worker processes at once (each holds a thread of the master's gRPC server).
MAX_RELAYED_STREAMS = 64
# Answers a worker may hold for a client that has not taken them yet.
RELAY_BUFFER = 64
_REASON_BYTES = 120


def _out(**fields: Any) -> gateway_pb2.StreamToClient:
    return gateway_pb2.StreamToClient(**fields)


def _closing(code: int, reason: str) -> gateway_pb2.StreamToClient:
    reason = reason.encode()[:_REASON_BYTES].decode(errors="ignore")
    return _out(close=gateway_pb2.StreamClose(code=code, reason=reason))


def _refused(status: int, message: str) -> gateway_pb2.StreamToClient:
    return _out(refused=gateway_pb2.StreamRefused(status=status, message=message))


@dataclass
class _State:
    """What one relayed conversation waits for (under its condition)."""

    woke: bool = False
    ended: bool = False
    closing: tuple[int, str] | None = None


class StreamConversations:
    """The master's side of relayed streams."""

    def __init__(self, open_session: OpenSession, limit: int = MAX_RELAYED_STREAMS) -> None:
        self._open = open_session
        self._slots = threading.BoundedSemaphore(limit)
        self.limit = limit

    def converse(
        self, token: str | None, incoming: Iterator[str], on_end: Callable[[Callable[[], None]], None]
    ) -> Iterator[gateway_pb2.StreamToClient]:
        """The answers for one relayed stream. `incoming`: the client's texts (ends when it
        leaves); `on_end(fn)` registers `fn` to run when the call ends (gRPC's add_callback)."""
        if not self._slots.acquire(blocking=False):
            yield _refused(HTTPStatus.SERVICE_UNAVAILABLE, f"the master relays {self.limit} streams already")
            return
        try:
            yield from self._converse(token, incoming, on_end)
        finally:
            self._slots.release()

    def _converse(
        self, token: str | None, incoming: Iterator[str], on_end: Callable[[Callable[[], None]], None]
    ) -> Iterator[gateway_pb2.StreamToClient]:
        cond = threading.Condition()
        startups: deque[str] = deque()
        state = _State()

        def wake() -> None:
            with cond:
                state.woke = True
                cond.notify()

        def end() -> None:
            with cond:
                state.ended = True
                cond.notify()

        try:
            session = self._open(token, wake)
        except Unauthenticated as exc:
            yield _refused(HTTPStatus.UNAUTHORIZED, str(exc))
            return
        except PermissionDenied as exc:
            yield _refused(HTTPStatus.FORBIDDEN, str(exc))
            return
        except TooManySubscribers as exc:
            yield _refused(HTTPStatus.SERVICE_UNAVAILABLE, str(exc))
            return
        on_end(end)

        def read() -> None:
            try:
                for text in incoming:
                    with cond:
                        if len(startups) >= MAX_WAITING_STARTUPS:
                            state.closing = (
                                CLOSE_POLICY,
                                f"more than {MAX_WAITING_STARTUPS} startup messages waiting",
                            )
                            cond.notify()
                            return
                        startups.append(text)
                        cond.notify()
            except Exception:  # the call ended (cancelled by the worker): nothing more comes
                pass
            finally:
                end()

        try:
            yield _out(accepted=True)
            threading.Thread(target=read, name="stream-relay-read", daemon=True).start()
            while True:
                with cond:
                    cond.wait_for(
                        lambda: bool(startups) or state.woke or state.ended or state.closing is not None
                    )
                    closing = state.closing
                    text = startups.popleft() if startups else None
                    woke, state.woke = state.woke, False
                    ended = state.ended and text is None
                if closing is not None:
                    yield _closing(*closing)
                    return
                if ended:
                    return
                if text is not None:
                    try:
                        for page in session.start(text):
                            for message in page:
                                yield _out(text=message)
                    except InvalidArgument as exc:
                        yield _closing(CLOSE_POLICY, str(exc))
                        return
                if woke:
                    for message in session.pending():
                        yield _out(text=message)
        except Dropped as exc:
            yield _closing(CLOSE_POLICY, str(exc))
        finally:
            session.close()


# The worker's side ----------------------------------------------------------------------------

# (the requests to send) -> the answers, a gRPC call that can be cancelled.
OpenRelay = Callable[[Iterator[gateway_pb2.StreamFromClient]], Any]


class RelayedStream:
    """A worker's /stream: the websocket relayed to the master's process."""

    def __init__(self, open_relay: OpenRelay, max_streams: int = MAX_RELAYED_STREAMS) -> None:
        self._open_relay = open_relay
        # Each relayed stream reads the master's answers in a thread of its own; one more stream
        # than there are threads would wait for an answer nobody reads: refused at once instead.
        self._threads = ThreadPoolExecutor(max_workers=max_streams, thread_name_prefix="stream-relay")
        self._open_streams = 0
        self.max_streams = max_streams

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        loop = asyncio.get_running_loop()
        headers = header_message(scope["headers"])
        foreign = cross_origin(headers)
        if foreign is not None:
            await refuse_json(scope, send, HTTPStatus.FORBIDDEN, foreign, {})
            return
        if self._open_streams >= self.max_streams:  # counted on the event loop's thread alone
            why = f"this process relays {self.max_streams} streams already; retry later"
            await refuse_json(scope, send, HTTPStatus.SERVICE_UNAVAILABLE, why, {"Retry-After": "5"})
            return
        self._open_streams += 1
        try:
            await self._relayed(scope, receive, send, loop, session_token(headers))
        finally:
            self._open_streams -= 1

    async def _relayed(
        self, scope: Scope, receive: Receive, send: Send, loop: asyncio.AbstractEventLoop, token: str | None
    ) -> None:
        to_master: queue.Queue[str | None] = queue.Queue(maxsize=MAX_WAITING_STARTUPS + 1)

        def requests() -> Iterator[gateway_pb2.StreamFromClient]:
            yield gateway_pb2.StreamFromClient(open=gateway_pb2.StreamOpen(session_token=token or ""))
            while (text := to_master.get()) is not None:
                yield gateway_pb2.StreamFromClient(text=text)

        answers: asyncio.Queue[gateway_pb2.StreamToClient | Exception | None] = asyncio.Queue()
        room = threading.Semaphore(RELAY_BUFFER)
        leaving = threading.Event()
        call = self._open_relay(requests())

        def pump() -> None:
            try:
                for answer in call:
                    while not room.acquire(timeout=1.0):
                        if leaving.is_set():
                            return
                    loop.call_soon_threadsafe(answers.put_nowait, answer)
                loop.call_soon_threadsafe(answers.put_nowait, None)
            except grpc.RpcError as exc:
                loop.call_soon_threadsafe(answers.put_nowait, exc)

        pumping = loop.run_in_executor(self._threads, pump)
        try:
            first = await answers.get()
            room.release()
            if not isinstance(first, gateway_pb2.StreamToClient) or first.WhichOneof("message") != "accepted":
                await _refuse(scope, send, first)
                return
            await send({"type": "websocket.accept"})
            await self._relay(receive, send, to_master, answers, room)
        finally:
            leaving.set()
            with contextlib.suppress(queue.Full):
                to_master.put_nowait(None)
            call.cancel()
            with contextlib.suppress(BaseException):
                await pumping

    async def _relay(
        self,
        receive: Receive,
        send: Send,
        to_master: queue.Queue[str | None],
        answers: asyncio.Queue[gateway_pb2.StreamToClient | Exception | None],
        room: threading.Semaphore,
    ) -> None:
        reading = asyncio.ensure_future(_client_to_master(receive, to_master))
        try:
            while True:
                answer = asyncio.ensure_future(answers.get())
                done, _ = await asyncio.wait({answer, reading}, return_when=asyncio.FIRST_COMPLETED)
                if answer not in done:
                    answer.cancel()
                    closing = reading.exception()
                    if isinstance(closing, _ClientBroke):
                        await _close(send, closing.code, closing.reason)
                    return
                got = answer.result()
                room.release()
                if got is None or isinstance(got, Exception):
                    await _close(send, CLOSE_NORMAL if got is None else 1011, "the master ended the stream")
                    return
                kind = got.WhichOneof("message")
                if kind == "text":
                    await asyncio.wait_for(send({"type": "websocket.send", "text": got.text}), SEND_TIMEOUT_S)
                elif kind == "close":
                    await _close(send, got.close.code, got.close.reason)
                    return
        except (OSError, TimeoutError):
            pass  # the client went away, or took no message for SEND_TIMEOUT_S
        finally:
            reading.cancel()
            with contextlib.suppress(BaseException):
                await reading


class _ClientBroke(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


async def _client_to_master(receive: Receive, to_master: queue.Queue[str | None]) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message["type"] != "websocket.receive":
            continue
        data = message.get("text")
        if data is None:
            data = (message.get("bytes") or b"").decode("utf-8", errors="replace")
        if len(data) > MAX_CLIENT_MESSAGE_BYTES:
            raise _ClientBroke(CLOSE_TOO_BIG, f"a message over {MAX_CLIENT_MESSAGE_BYTES} bytes")
        try:
            to_master.put_nowait(data)
        except queue.Full:
            raise _ClientBroke(
                CLOSE_POLICY, f"more than {MAX_WAITING_STARTUPS} startup messages waiting"
            ) from None


async def _refuse(scope: Scope, send: Send, answer: gateway_pb2.StreamToClient | Exception | None) -> None:
    if isinstance(answer, gateway_pb2.StreamToClient) and answer.WhichOneof("message") == "refused":
        await refuse_json(scope, send, answer.refused.status, answer.refused.message, {})
        return
    details = answer.details() if isinstance(answer, grpc.Call) else "no answer"
    log.warning("the master did not open a relayed stream", error=str(details))
    await refuse_json(
        scope,
        send,
        HTTPStatus.SERVICE_UNAVAILABLE,
        f"the master did not answer ({details}); retry shortly",
        {"Retry-After": "1"},
    )


async def _close(send: Send, code: int, reason: str) -> None:
    with contextlib.suppress(Exception):
        await send({"type": "websocket.close", "code": code, "reason": reason})
