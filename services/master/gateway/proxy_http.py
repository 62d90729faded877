"""One HTTP exchange with a task's service, for the task proxy (task_proxy.py), on httpx: the
caller's body streamed to the service as it comes, the service's answer streamed back as it comes,
status and headers as the service gave them (repeated ones included, hop-by-hop ones not).

Nothing is held beyond one piece of body each way (the ASGI server stops reading the caller's
socket while a piece waits; httpcore reads the service 64 KiB at a time, and reads again only once
the caller's socket took the last piece), so a large upload or download, or a slow
client, costs the master a fixed amount of memory per exchange, and backpressure reaches the other
end. A client that leaves (the ASGI server's http.disconnect, watched for once its body is in,
whether or not the answer is moving) cancels the exchange, which closes the connection to the
service: a long poll or an idle event stream ends there too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any

import httpx

from services.common.logging import get_logger
from services.master.gateway.proxy_headers import downstream_headers, upstream_headers

log = get_logger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

# Jupyter uploads large files in 1 MiB chunks; a body over this is refused (from its Content-Length
# unread; a chunked one once it passes the limit).
MAX_PROXY_BODY_BYTES = 32 * 1024 * 1024
CONNECT_TIMEOUT_S = 10.0
# A plain request whose service says nothing for this long is given up, and so is a caller whose
# body stops arriving (kernel traffic goes over websockets, which have no such limit).
RESPONSE_TIMEOUT_S = 300.0


class UpstreamError(Exception):
    """The task's service could not be reached, or broke off before its answer started."""


class _ClientLeft(Exception):
    """The caller went away while its body was being sent on."""


class _BodyRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def new_client() -> httpx.AsyncClient:
    """The client for tasks' services, one per process (made on its event loop)."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(RESPONSE_TIMEOUT_S, connect=CONNECT_TIMEOUT_S, pool=None),
        # No bound on connections at once: the public server's own bound on connections is it.
        # A new connection per exchange, none kept: a service that writes an answer's head and
        # body apart without TCP_NODELAY (http.server, werkzeug) stalls 40 ms on a reused
        # connection (Nagle's algorithm waits for our delayed ACK), while a new connection starts
        # in quick-ACK mode; a connection on loopback or the agents' network costs far less.
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
        trust_env=False,  # never through a proxy named in the environment: tasks are reached directly
        follow_redirects=False,  # the caller follows the service's redirects itself
    )


class _Caller:
    """The caller's side of the exchange: its body as the service pulls it, then the watch for its
    departure. receive() has one reader at a time: the body's generator, then the watch."""

    def __init__(self, receive: Receive, has_body: bool) -> None:
        self._receive = receive
        self.body_done = asyncio.Event()
        if not has_body:
            self.body_done.set()

    async def body(self) -> AsyncIterator[bytes]:
        total = 0
        while True:
            try:
                message = await asyncio.wait_for(self._receive(), RESPONSE_TIMEOUT_S)
            except TimeoutError:
                stalled = f"the request body stalled: no data for {RESPONSE_TIMEOUT_S:g} s"
                raise _BodyRefused(HTTPStatus.REQUEST_TIMEOUT, stalled) from None
            if message["type"] == "http.disconnect":
                raise _ClientLeft
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > MAX_PROXY_BODY_BYTES:
                raise _BodyRefused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, _too_large())
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                self.body_done.set()
                return

    async def departure(self) -> None:
        """Returns once the caller disconnected (what it sends after its body is not read)."""
        await self.body_done.wait()
        while (await self._receive())["type"] != "http.disconnect":
            pass


def _too_large() -> str:
    return f"request body over the proxy's limit of {MAX_PROXY_BODY_BYTES} bytes"


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    # The unread rest of a refused body would be taken for the next request: close the connection.
    headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def exchange(
    client: httpx.AsyncClient,
    scope: Scope,
    receive: Receive,
    send: Send,
    host: str,
    port: int,
    credential: str | None,
) -> None:
    """The caller's request to host:port and the answer back; UpstreamError when the service
    could not be reached (nothing was sent to the caller then)."""
    length_header = next((v for k, v in scope["headers"] if k.lower() == b"content-length"), None)
    chunked = any(k.lower() == b"transfer-encoding" for k, _ in scope["headers"])
    length = 0
    if length_header is not None:
        # The ASGI server's parser has checked it is a number; bounded here before any is read.
        length = int(length_header) if length_header.isdigit() else -1
        if length < 0:
            shown = length_header.decode("latin-1")
            await _refuse(send, HTTPStatus.BAD_REQUEST, f"bad Content-Length {shown!r}")
            return
        if length > MAX_PROXY_BODY_BYTES:
            await _refuse(send, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, _too_large())
            return
    caller = _Caller(receive, has_body=chunked or length > 0)
    working = asyncio.ensure_future(_exchange(client, scope, caller, send, host, port, credential))
    leaving = asyncio.ensure_future(caller.departure())
    try:
        await asyncio.wait({working, leaving}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # The caller left (or the server stops): the exchange, and its connection to the service,
        # ends with it.
        for task in (working, leaving):
            task.cancel()
        for task in (leaving, working):
            with contextlib.suppress(asyncio.CancelledError, _ClientLeft):
                await task
    # An UpstreamError surfaces from the await above; a departure does not.


async def _exchange(
    client: httpx.AsyncClient,
    scope: Scope,
    caller: _Caller,
    send: Send,
    host: str,
    port: int,
    credential: str | None,
) -> None:
    headers = upstream_headers(scope, credential=credential)
    length = next((v for k, v in scope["headers"] if k.lower() == b"content-length"), None)
    if length is not None:
        headers.append((b"content-length", length))  # streamed with its length, not chunked
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string") or b""
    url = httpx.URL(
        scheme="http", host=host.strip("[]"), port=port, raw_path=raw_path + (b"?" + query if query else b"")
    )
    body = None if caller.body_done.is_set() else caller.body()
    request = httpx.Request(scope["method"], url, headers=headers, content=body)
    try:
        upstream = await client.send(request, stream=True)
    except _BodyRefused as exc:
        await _refuse(send, exc.status, str(exc))
        return
    except httpx.HTTPError as exc:
        raise UpstreamError(
            f"the task's service at {host}:{port} did not answer: {exc or type(exc).__name__}"
        ) from None
    try:
        await _answer(scope, upstream, send)
    finally:
        await upstream.aclose()


async def _answer(scope: Scope, upstream: httpx.Response, send: Send) -> None:
    status = upstream.status_code
    no_body = scope["method"] == "HEAD" or status in (HTTPStatus.NO_CONTENT, HTTPStatus.NOT_MODIFIED)
    headers = downstream_headers(upstream.headers.raw)
    length = upstream.headers.get("content-length")
    if length is not None and "chunked" not in upstream.headers.get("transfer-encoding", "").lower():
        headers.append((b"content-length", length.encode("latin-1")))  # else the server chunks it
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if no_body:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    try:
        async for chunk in upstream.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except httpx.HTTPError as exc:
        # The service broke off mid-answer: returning unfinished makes the server close the
        # caller's connection, which tells it the answer is cut short (a finished chunked answer
        # would not).
        log.info("proxied answer cut short by the task's service", path=scope["path"], error=str(exc))
        return
    await send({"type": "http.response.body", "body": b"", "more_body": False})
