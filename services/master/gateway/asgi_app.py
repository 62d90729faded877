"""The public HTTP port as an ASGI application (served by uvicorn: public_server.py).

Routes are synchronous callables (http_answers.PlainRoute: the REST gateway, /info, /healthz,
/metrics, the WebUI): each request runs them in a thread of this process, with an AsgiRequest that
reads the body from the event loop on demand. The task proxy (/proxy/, task_proxy.py) runs on the
event loop itself: its exchanges are I/O from end to end, HTTP and websockets alike.

The bounds keep their meaning (http_limits.py): at most `workers` ordinary requests at once in
this process, one more waits up to `queue_timeout_s` for a turn and then gets 503 with Retry-After;
streams and proxied exchanges take no turn. Streamed answers go out one chunk per message, and a
client that goes away cancels the producer behind its stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from http.client import HTTPMessage
from typing import Any

from services.common.logging import get_logger
from services.master.gateway.asgi_websocket import refuse
from services.master.gateway.http_answers import (
    MAX_REQUEST_BODY_BYTES,
    BodyError,
    PlainRoute,
    Response,
    StreamingResponse,
)
from services.master.gateway.http_limits import HttpLimits, is_long_lived
from services.master.gateway.stream_relay import RelayedStream
from services.master.gateway.stream_socket import STREAM_PATH, StreamEndpoint
from services.master.gateway.task_proxy import PROXY_PREFIX, TaskProxy

log = get_logger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_BUSY = b'{"error": "the master is busy: too many requests at once; retry shortly"}'
_NOT_FOUND = b'{"error": "not found"}'
_INTERNAL = b'{"error": "internal error"}'
# A body that stops arriving gives its request's turn back after this (uvicorn has no such
# timeout). A chunked body is refused only once its data passes the limit: uvicorn's parsers do not
# show the chunk sizes.
BODY_IDLE_TIMEOUT_S = 30.0
# The longest stream answered whole to an HTTP/1.0 client.
MAX_HTTP10_STREAM_BYTES = 64 * 1024 * 1024
# Chunks a stream's producer may be ahead of its client.
STREAM_BUFFER_CHUNKS = 256
# A stream that ends on its own (StreamingResponse.read_ahead) and is not followed is read ahead up
# to this many bytes before it is answered: one that ends within them (a trial's metrics, a page of
# logs: most such streams) goes out in one write, still chunked, without a producer handing its
# chunks to the loop one by one (a wake-up, a queue and a disconnect watch each): the serving layer
# answers a short stream 4× as fast that way (bench/http_server_overhead.py).
READ_AHEAD_BYTES = 256 * 1024
_END = object()  # the end of a stream's chunks


@dataclass
class _EndedStream:
    """A stream that ended while read ahead: its chunks, answered at once."""

    response: StreamingResponse
    body: bytes


def _resumed(first: list[bytes], rest: Iterator[bytes]) -> Iterator[bytes]:
    """The chunks read ahead, then the rest; closing it closes the rest (the stream's own end)."""
    try:
        yield from first
        yield from rest
    finally:
        close = getattr(rest, "close", None)
        if close is not None:
            close()


def _read_ahead(response: StreamingResponse) -> StreamingResponse | _EndedStream:
    """The whole stream when it ends within READ_AHEAD_BYTES; otherwise the stream, resumed."""
    parts: list[bytes] = []
    size = 0
    chunks = response.chunks
    try:
        for chunk in chunks:
            parts.append(chunk)
            size += len(chunk)
            if size > READ_AHEAD_BYTES:
                response.chunks = _resumed(parts, chunks)
                return response
    except Exception:
        # As a producer's failure mid-stream: the client gets what was made, then the end.
        log.exception("stream failed while read ahead")
    close = getattr(chunks, "close", None)
    if close is not None:
        close()
    return _EndedStream(response, b"".join(parts))


class AsgiRequest:
    """One HTTP request, as routes see it (http_request.HttpRequest). Its methods are called from
    the route's thread; the body is pulled from the event loop when a route asks for it, so a
    refused body (413 from its Content-Length) is never read."""

    def __init__(
        self, scope: Scope, receive: Receive, loop: asyncio.AbstractEventLoop, turns: asyncio.Semaphore
    ):
        query = scope.get("query_string") or b""
        raw_path = scope.get("raw_path") or scope["path"].encode()
        target = raw_path.decode("latin-1")
        self.path = f"{target}?{query.decode('latin-1')}" if query else target
        self.command: str = scope["method"]
        self.headers = HTTPMessage()
        for name, value in scope["headers"]:
            self.headers[name.decode("latin-1")] = value.decode("latin-1")
        client = scope.get("client") or ("", 0)
        self.client_address = (client[0], client[1])
        self._receive = receive
        self._loop = loop
        self._turns = turns
        self._body: bytes | None = None
        self.body_complete = False  # whether the whole body was read (keeps the connection usable)
        self.has_turn = False

    def read_body(self, limit: int = MAX_REQUEST_BODY_BYTES) -> bytes:
        if self._body is None:
            raw_length = self.headers.get("Content-Length")
            if raw_length is not None:
                try:
                    length = int(raw_length)
                except ValueError:
                    raise BodyError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {raw_length!r}") from None
                if length > limit:
                    raise BodyError(
                        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                        f"request body of {length} bytes is over this call's limit of {limit} bytes",
                    )
            future = asyncio.run_coroutine_threadsafe(self._read(limit), self._loop)
            self._body = future.result()
        return self._body

    async def _read(self, limit: int) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            try:
                message = await asyncio.wait_for(self._receive(), BODY_IDLE_TIMEOUT_S)
            except TimeoutError:
                message_text = f"the request body stalled: no data for {BODY_IDLE_TIMEOUT_S:g} s"
                raise BodyError(HTTPStatus.REQUEST_TIMEOUT, message_text) from None
            if message["type"] == "http.disconnect":
                raise BodyError(HTTPStatus.BAD_REQUEST, "the client went away before its body ended")
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > limit:  # chunked: the sizes are known only as the chunks come
                raise BodyError(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    f"request body over this call's limit of {limit} bytes",
                )
            parts.append(chunk)
            if not message.get("more_body", False):
                self.body_complete = True
                return b"".join(parts)

    def leave_turns(self) -> None:
        if self.has_turn:
            self.has_turn = False
            self._loop.call_soon_threadsafe(self._turns.release)


class GatewayApp:
    """The ASGI application of the public port.

    /proxy/ goes to `proxy` (HTTP and websockets) once it is set (the master sets it when its
    domain is up); the websocket /stream to `stream` once it is set (only with the
    `streaming_updates` feature switch on, as on Determined: otherwise 404); everything else is
    offered to `routes` in order, then 404.
    """

    def __init__(self, routes: list[PlainRoute], limits: HttpLimits, proxy: TaskProxy | None = None) -> None:
        self.routes = routes
        self.proxy = proxy
        self.stream: StreamEndpoint | RelayedStream | None = None
        self.limits = limits
        # Threads are started on demand: ordinary requests are bounded by the turns, and a stream
        # (a followed log waiting for its next line) holds one for its life; max_connections
        # bounds those.
        self._threads = ThreadPoolExecutor(
            max_workers=limits.workers + limits.max_connections, thread_name_prefix="http-route"
        )
        self._turns: asyncio.Semaphore | None = None

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self.stream is not None:
            self.stream.close()

    async def aclose(self) -> None:
        """On the serving loop, once it stopped serving: what the proxy holds there."""
        if self.proxy is not None:
            await self.proxy.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            if self.proxy is not None and scope["path"].startswith(PROXY_PREFIX):
                await self.proxy.websocket(scope, receive, send)
            elif scope["path"] == STREAM_PATH:
                if self.stream is not None:
                    await self.stream.websocket(scope, receive, send)
                else:  # not a route (the feature switch is off): as any unknown path
                    await receive()  # websocket.connect
                    await refuse(scope, send, HTTPStatus.NOT_FOUND, _NOT_FOUND)
            else:
                await receive()  # websocket.connect
                await send({"type": "websocket.close", "code": 1008, "reason": "no websocket here"})
        elif kind == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.proxy is not None and scope["path"].startswith(PROXY_PREFIX):
            await self.proxy.http(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.limits.workers)
        request = AsgiRequest(scope, receive, loop, self._turns)
        if not is_long_lived(request.path, request.headers):
            try:
                await asyncio.wait_for(self._turns.acquire(), self.limits.queue_timeout_s)
            except TimeoutError:
                await _respond(
                    send,
                    request,
                    Response(HTTPStatus.SERVICE_UNAVAILABLE, _BUSY, headers={"Retry-After": "1"}),
                )
                return
            request.has_turn = True
        chunks = _Chunks(loop)
        answered: asyncio.Future[Response | StreamingResponse | _EndedStream] = loop.create_future()
        http10 = scope.get("http_version") == "1.0"
        working = loop.run_in_executor(self._threads, self._answer, request, answered, chunks, http10)
        try:
            response = await answered
            if isinstance(response, StreamingResponse):
                request.leave_turns()
                await _stream(send, receive, request, response, chunks)
            elif isinstance(response, _EndedStream):
                await _respond_ended(send, response)
            else:
                await _respond(send, request, response)
        finally:
            chunks.leaving.set()
            with contextlib.suppress(Exception):
                await working  # a stream's producer returns once its client left (cancelled)
            if request.has_turn:
                request.has_turn = False
                self._turns.release()

    def _answer(
        self,
        request: AsgiRequest,
        answered: asyncio.Future[Response | StreamingResponse | _EndedStream],
        chunks: _Chunks,
        http10: bool,
    ) -> None:
        """In a thread: route, hand the answer to the loop, and when it is a stream go on in this
        same thread as its producer (one thread hop per request, streams included)."""
        response: Response | StreamingResponse | _EndedStream = Response(
            HTTPStatus.INTERNAL_SERVER_ERROR, _INTERNAL
        )
        try:
            response = self._route(request)
            if isinstance(response, StreamingResponse):
                if http10:
                    response = _whole_stream(request, response)
                elif response.read_ahead and not is_long_lived(request.path, request.headers):
                    response = _read_ahead(response)
        finally:
            chunks.loop.call_soon_threadsafe(_settle, answered, response)
        if isinstance(response, StreamingResponse):
            chunks.produce(response)

    def _route(self, request: AsgiRequest) -> Response | StreamingResponse:
        for route in self.routes:
            try:
                response = route(request)
            except BodyError as exc:
                return Response(exc.status, json.dumps({"error": exc.message}).encode())
            except Exception:
                log.exception("http handler failed", path=request.path)
                return Response(HTTPStatus.INTERNAL_SERVER_ERROR, _INTERNAL)
            if response is not None:
                return response
        return Response(HTTPStatus.NOT_FOUND, _NOT_FOUND)


def _whole_stream(request: AsgiRequest, response: StreamingResponse) -> Response:
    """An HTTP/1.0 client cannot read chunks (and uvicorn's httptools protocol would send them):
    it gets the stream whole, with its length, when the stream ends and is not too long; a followed
    stream, which does not end, is refused with the reason."""
    try:
        if is_long_lived(request.path, request.headers):
            body = b'{"error": "a followed stream needs HTTP/1.1 (chunked answers)"}'
            return Response(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, body, headers={"Connection": "close"})
        parts: list[bytes] = []
        size = 0
        for chunk in response.chunks:
            size += len(chunk)
            if size > MAX_HTTP10_STREAM_BYTES:
                body = b'{"error": "the stream is too long for HTTP/1.0: use HTTP/1.1"}'
                return Response(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, body, headers={"Connection": "close"})
            parts.append(chunk)
        return Response(
            HTTPStatus(response.status), b"".join(parts), response.content_type, {"Connection": "close"}
        )
    finally:
        response.cancel()  # a no-op once it ended
        close = getattr(response.chunks, "close", None)
        if close is not None:
            close()


def _headers(content_type: str, extra: dict[str, str] | None, close: bool) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", content_type.encode("latin-1"))]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (extra or {}).items()]
    if close:
        headers.append((b"connection", b"close"))
    return headers


async def _respond(send: Send, request: AsgiRequest, response: Response) -> None:
    # A body that was neither read nor refused unread would sit before the next request: the
    # server closes such a connection after the answer, and says so.
    close = bool(request.headers.get("Content-Length") or request.headers.get("Transfer-Encoding"))
    close = close and not request.body_complete
    headers = _headers(response.content_type, response.headers, close)
    headers.append((b"content-length", str(len(response.body)).encode()))
    await send({"type": "http.response.start", "status": int(response.status), "headers": headers})
    await send({"type": "http.response.body", "body": b"" if request.command == "HEAD" else response.body})


async def _respond_ended(send: Send, ended: _EndedStream) -> None:
    """A stream read whole: its headers and chunks in one go, chunked as any stream is."""
    response = ended.response
    headers = _headers(response.content_type, response.headers, close=False)
    await send({"type": "http.response.start", "status": int(response.status), "headers": headers})
    await send({"type": "http.response.body", "body": ended.body, "more_body": False})


def _settle(answered: asyncio.Future[Any], response: Response | StreamingResponse | _EndedStream) -> None:
    if not answered.done():
        answered.set_result(response)


class _Chunks:
    """A stream's chunks, from the producer's thread to the loop. The loop sends what gathered
    since its last write as one write, so a fast producer (a page of metrics) costs a wake-up per
    write, not per message, and a slow one (a followed log) still gets each message out at once.
    A producer more than STREAM_BUFFER_CHUNKS ahead of its client waits, as it did on a blocking
    socket, instead of filling memory."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ready: asyncio.Queue[bytes | object] = asyncio.Queue()
        self.room = threading.Semaphore(STREAM_BUFFER_CHUNKS)
        self.leaving = threading.Event()

    def produce(self, response: StreamingResponse) -> None:
        try:
            for chunk in response.chunks:
                if not chunk:
                    continue
                while not self.room.acquire(timeout=1.0):
                    if self.leaving.is_set():
                        return
                self.loop.call_soon_threadsafe(self.ready.put_nowait, chunk)
        finally:
            self.loop.call_soon_threadsafe(self.ready.put_nowait, _END)
            close = getattr(response.chunks, "close", None)
            if close is not None:
                close()

    async def next_batch(self) -> tuple[bytes, bool]:
        """What gathered (waiting for at least one chunk), and whether the stream ended."""
        parts = [await self.ready.get()]
        while not self.ready.empty():
            parts.append(self.ready.get_nowait())
        for _ in parts:
            self.room.release()
        return b"".join(p for p in parts if isinstance(p, bytes)), parts[-1] is _END


async def _stream(
    send: Send, receive: Receive, request: AsgiRequest, response: StreamingResponse, chunks: _Chunks
) -> None:
    """Chunks as they come; a disconnect (seen by receive()) cancels the producer."""
    gone = asyncio.ensure_future(_disconnected(receive, request))
    finished = False
    try:
        headers = _headers(response.content_type, response.headers, close=False)
        await send({"type": "http.response.start", "status": int(response.status), "headers": headers})
        ended = False
        while not ended:
            batch = asyncio.ensure_future(chunks.next_batch())
            done, _ = await asyncio.wait({batch, gone}, return_when=asyncio.FIRST_COMPLETED)
            if batch not in done:
                batch.cancel()
                break  # the client left while the producer waited for its next message
            body, ended = batch.result()
            if body:
                await send({"type": "http.response.body", "body": body, "more_body": True})
        if ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            finished = True
    except OSError:
        pass  # the client went away mid-stream (uvicorn's ClientDisconnected is an OSError)
    finally:
        gone.cancel()
        chunks.leaving.set()
        if not finished:
            response.cancel()  # the producer must not run on for nobody


async def _disconnected(receive: Receive, request: AsgiRequest) -> None:
    """Returns when the client disconnects. A body nobody read is read (and dropped) on the way."""
    while (await receive())["type"] != "http.disconnect":
        pass
