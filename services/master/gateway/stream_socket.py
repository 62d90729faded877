"""Determined's streaming updates on the public port: `GET /stream`, a websocket (the stock
client's `determined.common.streams` and the WebUI's live stores open it), served when the master
config turns on `feature_switches: [streaming_updates]`. With the switch off the path is not a
route, as on Determined: the handshake is answered 404.

The caller is authenticated like every other route (an `Authorization: Bearer` header, or the
WebUI's `auth` cookie) and must hold a user's session. Then the conversation is the domain's
(domain/streams/session.py): each text message the client sends is a startup message, answered
with a sync; between them, the changes its subscription matches go out as they commit.

A handshake whose Origin is another site's is refused (403): the `auth` cookie is sent with any
page's websocket, so only the master's own pages may open one.

Bounds: a client message over specs.MAX_CLIENT_MESSAGE_BYTES closes the connection (1009), as
do more than MAX_WAITING_STARTUPS startup messages waiting their turn (1008); a client whose queue
passes its bound (publisher.py) or that does not take a message within SEND_TIMEOUT_S is dropped
(1008, "too slow"): the stock client reconnects and syncs from what it knows. Each send waits for
the socket to drain (uvicorn's flow control), so nothing piles up here either.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from email.message import Message
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from services.common.logging import get_logger
from services.common.principal import Principal
from services.master.domain.kernel.errors import InvalidArgument, PermissionDenied, Unauthenticated
from services.master.domain.streams.publisher import Publisher, TooManySubscribers
from services.master.domain.streams.session import Dropped, StreamSession
from services.master.domain.streams.specs import MAX_CLIENT_MESSAGE_BYTES
from services.master.gateway.asgi_websocket import (
    CLOSE_POLICY,
    CLOSE_TOO_BIG,
    Receive,
    Scope,
    Send,
    refuse_json,
)
from services.master.gateway.proxy_headers import header_message, session_token
from services.master.store.db import Database

log = get_logger(__name__)

STREAM_PATH = "/stream"
MAX_WAITING_STARTUPS = 16
SEND_TIMEOUT_S = 60.0
# Sessions opened and syncs read at once (each reads the database); more wait their turn.
STREAM_THREADS = 8
_REASON_BYTES = 120  # a close reason must fit a control frame (125 bytes)

# (the caller's session token or None, wake) -> its session; DomainError when refused.
OpenSession = Callable[[str | None, Callable[[], None]], StreamSession]


def cross_origin(headers: Message) -> str | None:
    """Why a handshake from another site's page is refused, or None. A browser sends the WebUI's
    `auth` cookie with any page's websocket to the master: only the master's own pages may open
    one (as gorilla/websocket's default origin check, under Determined's, allows). Clients that
    are not browsers send no Origin."""
    origin = headers.get("Origin")
    if not origin:
        return None
    host = (headers.get("Host") or "").lower()
    if urlsplit(origin).netloc.lower() == host:
        return None
    return f"websocket: request origin {origin!r} is not this master's ({host})"


class _Closing(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class StreamEndpoint:
    """Answers a websocket scope on STREAM_PATH."""

    def __init__(self, open_session: OpenSession) -> None:
        self._open = open_session
        self._threads = ThreadPoolExecutor(max_workers=STREAM_THREADS, thread_name_prefix="stream")

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        loop = asyncio.get_running_loop()
        woke = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(woke.set)

        headers = header_message(scope["headers"])
        foreign = cross_origin(headers)
        if foreign is not None:
            await refuse_json(scope, send, HTTPStatus.FORBIDDEN, foreign, {})
            return
        token = session_token(headers)
        try:
            session = await loop.run_in_executor(self._threads, self._open, token, wake)
        except Unauthenticated as exc:
            await refuse_json(scope, send, HTTPStatus.UNAUTHORIZED, str(exc), {})
            return
        except PermissionDenied as exc:
            await refuse_json(scope, send, HTTPStatus.FORBIDDEN, str(exc), {})
            return
        except TooManySubscribers as exc:
            await refuse_json(scope, send, HTTPStatus.SERVICE_UNAVAILABLE, str(exc), {"Retry-After": "5"})
            return
        try:
            await send({"type": "websocket.accept"})
            await self._converse(session, receive, send, woke)
        finally:
            session.close()

    async def _converse(
        self, session: StreamSession, receive: Receive, send: Send, woke: asyncio.Event
    ) -> None:
        startups: asyncio.Queue[str | bytes] = asyncio.Queue()
        reading = asyncio.ensure_future(_read(receive, startups))
        try:
            while True:
                got_startup = asyncio.ensure_future(startups.get())
                got_wake = asyncio.ensure_future(woke.wait())
                done, _ = await asyncio.wait(
                    {got_startup, got_wake, reading}, return_when=asyncio.FIRST_COMPLETED
                )
                for waiting in (got_startup, got_wake):
                    if waiting not in done:
                        waiting.cancel()
                if reading in done:
                    exc = reading.exception()
                    if isinstance(exc, _Closing):
                        await _close(send, exc.code, exc.reason)
                    return  # the client left (or broke a bound)
                if got_startup in done:
                    await self._sync(session, got_startup.result(), send)
                if got_wake in done or woke.is_set():
                    woke.clear()
                    for text in session.pending():
                        await _send(send, text)
        except _Closing as closing:
            await _close(send, closing.code, closing.reason)
        except Dropped as exc:
            await _close(send, CLOSE_POLICY, str(exc))
        except OSError:
            pass  # the client went away mid-send
        finally:
            reading.cancel()
            with contextlib.suppress(BaseException):
                await reading

    async def _sync(self, session: StreamSession, text: str | bytes, send: Send) -> None:
        loop = asyncio.get_running_loop()
        try:
            pages = await loop.run_in_executor(self._threads, session.start, text)
        except InvalidArgument as exc:
            raise _Closing(CLOSE_POLICY, str(exc)) from None
        while True:
            page: list[str] | None = await loop.run_in_executor(self._threads, next, pages, None)
            if page is None:
                return
            for message in page:
                await _send(send, message)


async def _read(receive: Receive, startups: asyncio.Queue[str | bytes]) -> None:
    """The client's messages into `startups`; returns when it disconnects, _Closing on a bound."""
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message["type"] != "websocket.receive":
            continue
        data: Any = message.get("text")
        if data is None:
            data = message.get("bytes") or b""
        if len(data) > MAX_CLIENT_MESSAGE_BYTES:
            raise _Closing(CLOSE_TOO_BIG, f"a message over {MAX_CLIENT_MESSAGE_BYTES} bytes")
        if startups.qsize() >= MAX_WAITING_STARTUPS:
            raise _Closing(CLOSE_POLICY, f"more than {MAX_WAITING_STARTUPS} startup messages waiting")
        startups.put_nowait(data)


async def _send(send: Send, text: str) -> None:
    try:
        await asyncio.wait_for(send({"type": "websocket.send", "text": text}), SEND_TIMEOUT_S)
    except TimeoutError:
        raise _Closing(CLOSE_POLICY, f"too slow: a message waited over {SEND_TIMEOUT_S:g} s") from None


async def _close(send: Send, code: int, reason: str) -> None:
    reason = reason.encode()[:_REASON_BYTES].decode(errors="ignore")
    with contextlib.suppress(Exception):
        await send({"type": "websocket.close", "code": code, "reason": reason})


def local_sessions(
    db: Database,
    publisher: Publisher,
    authenticate: Callable[[str], Principal],
    current: Callable[[Principal], Principal] | None = None,
) -> OpenSession:
    """Sessions opened in the master's process: the caller's user session, then a subscriber that
    decides each row by the caller's grants as they are then (`current`: StreamSession's)."""

    def open_session(token: str | None, wake: Callable[[], None]) -> StreamSession:
        if token is None:
            raise Unauthenticated("no credentials: log in (a Bearer token or the auth cookie)")
        principal = authenticate(token)
        return StreamSession(db, publisher, principal, wake, current)

    return open_session
