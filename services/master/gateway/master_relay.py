"""Relays a request of the public ASGI server to the master's threaded loopback listener, which
answers what needs the socket itself or the master's in-process state: the task proxy (HTTP
answers written as the task's service sent them, websocket and TCP tunnels) and, from a worker
process, /healthz and /metrics.

HTTP: one loopback connection per request (`Connection: close`), the body streamed there as
chunks, the answer parsed with h11 and streamed back as it comes; a client that leaves closes the
loopback connection, which ends the exchange behind it. Websockets: the handshake is repeated
towards the listener with the client's credentials and subprotocols, its refusal (401, 403, 404,
503 with the JSON reason) is passed on as the HTTP answer, and once both sides are open every
message is passed on as it is, in both directions, until either side closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import h11
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from services.common.logging import get_logger

log = get_logger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

# Headers of one hop only (RFC 9110 7.6.1): the relay speaks its own connection on either side.
_HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"content-length",
}
# Written by the public server itself: relayed too, they would come twice.
_SERVER_OWN = {b"date", b"server"}
# The websocket handshake headers the client library writes itself.
_WEBSOCKET_OWN = {
    b"host",
    b"sec-websocket-key",
    b"sec-websocket-version",
    b"sec-websocket-extensions",
    b"sec-websocket-protocol",
}
CONNECT_TIMEOUT_S = 10.0
READ_BYTES = 64 * 1024
# As the threaded server's frames (websocket_frames.MAX_FRAME_BYTES): a message bigger than this
# is refused on either side.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


def _forwarded_headers(scope: Scope, skip: set[bytes]) -> list[tuple[bytes, bytes]]:
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in skip]
    client = scope.get("client")
    if client:
        # The listener (and the task's service behind it) sees loopback; the real peer travels here.
        prior = [v for k, v in headers if k.lower() == b"x-forwarded-for"]
        chain = (prior[0] + b", " if prior else b"") + client[0].encode()
        headers = [(k, v) for k, v in headers if k.lower() != b"x-forwarded-for"]
        headers.append((b"x-forwarded-for", chain))
    return headers


def _target(scope: Scope) -> bytes:
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string") or b""
    return raw_path + (b"?" + query if query else b"")


class MasterRelay:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            log.warning("the master's loopback listener did not answer", error=str(exc))
            body = b'{"error": "the master did not answer; retry shortly"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        client_gone = asyncio.Event()
        uploading = asyncio.ensure_future(self._upload(scope, receive, writer, client_gone))
        try:
            await self._download(scope, reader, send, client_gone)
        except (OSError, h11.ProtocolError) as exc:
            log.debug("relayed http exchange ended early", path=scope["path"], error=str(exc))
        finally:
            uploading.cancel()
            with contextlib.suppress(BaseException):
                await uploading
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _upload(
        self, scope: Scope, receive: Receive, writer: asyncio.StreamWriter, client_gone: asyncio.Event
    ) -> None:
        """The request, then its body as chunks; then wait for the client to leave, which ends
        the exchange (the download sees client_gone)."""
        headers = _forwarded_headers(scope, _HOP_BY_HOP)
        lines = [b"%s %s HTTP/1.1" % (scope["method"].encode(), _target(scope))]
        lines += [k + b": " + v for k, v in headers]
        # A request without a body is sent without one: a GET stays a plain GET behind the relay.
        body_done = not any(
            k.lower() in (b"content-length", b"transfer-encoding") for k, _ in scope["headers"]
        )
        if not body_done:
            lines.append(b"Transfer-Encoding: chunked")
        lines += [b"Connection: close", b"", b""]
        writer.write(b"\r\n".join(lines))
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                client_gone.set()
                writer.close()  # the listener sees the connection end, and so does its exchange
                return
            if body_done:
                continue
            chunk = message.get("body", b"")
            if chunk:
                writer.write(b"%X\r\n%s\r\n" % (len(chunk), chunk))
            if not message.get("more_body", False):
                writer.write(b"0\r\n\r\n")
                body_done = True
            await writer.drain()

    async def _download(
        self, scope: Scope, reader: asyncio.StreamReader, send: Send, client_gone: asyncio.Event
    ) -> None:
        parser = h11.Connection(h11.CLIENT)
        # h11 needs to have "sent" the request to read the answer; the request went out raw.
        parser.send(h11.Request(method=scope["method"], target=_target(scope), headers=[(b"host", b"relay")]))
        parser.send(h11.EndOfMessage())
        started = False
        while not client_gone.is_set():
            event = parser.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(READ_BYTES)
                parser.receive_data(data)
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                headers = [(k, v) for k, v in event.headers if k not in _HOP_BY_HOP and k not in _SERVER_OWN]
                await send({"type": "http.response.start", "status": event.status_code, "headers": headers})
                started = True
            elif isinstance(event, h11.Data):
                await send({"type": "http.response.body", "body": bytes(event.data), "more_body": True})
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                if started:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                return

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        uri = f"ws://{self.host}:{self.port}{_target(scope).decode('latin-1')}"
        headers = [
            (k.decode("latin-1"), v.decode("latin-1"))
            for k, v in _forwarded_headers(scope, _HOP_BY_HOP | _WEBSOCKET_OWN)
        ]
        try:
            upstream = await connect(
                uri,
                additional_headers=headers,
                subprotocols=scope.get("subprotocols") or None,
                compression=None,
                open_timeout=CONNECT_TIMEOUT_S,
                ping_interval=None,  # the client's own pings pass through as messages' keep-alive
                max_size=MAX_MESSAGE_BYTES,
                user_agent_header=None,
            )
        except InvalidStatus as exc:
            await _refuse(
                scope, send, exc.response.status_code, exc.response.headers.items(), exc.response.body
            )
            return
        except (OSError, TimeoutError) as exc:
            log.warning("the master's loopback listener did not answer a websocket", error=str(exc))
            await _refuse(
                scope,
                send,
                503,
                [("Content-Type", "application/json")],
                b'{"error": "the master did not answer"}',
            )
            return
        await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
        async with upstream:
            to_upstream = asyncio.ensure_future(_client_to_upstream(receive, upstream))
            to_client = asyncio.ensure_future(_upstream_to_client(upstream, send))
            await asyncio.wait({to_upstream, to_client}, return_when=asyncio.FIRST_COMPLETED)
            for task in (to_upstream, to_client):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": upstream.close_code or 1000})


async def _refuse(scope: Scope, send: Send, status: int, headers: Any, body: bytes | None) -> None:
    """The listener's refusal as the client's HTTP answer, where the server can send one (the
    websocket denial extension); a bare close otherwise."""
    if "websocket.http.response" in (scope.get("extensions") or {}):
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        raw = [(k, v) for k, v in raw if k not in _HOP_BY_HOP]
        await send({"type": "websocket.http.response.start", "status": status, "headers": raw})
        await send({"type": "websocket.http.response.body", "body": body or b""})
    else:
        await send({"type": "websocket.close", "code": 1008})


async def _client_to_upstream(receive: Receive, upstream: ClientConnection) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("bytes") is not None:
            await upstream.send(message["bytes"])
        elif message.get("text") is not None:
            await upstream.send(message["text"])


async def _upstream_to_client(upstream: ClientConnection, send: Send) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for message in upstream:
            if isinstance(message, bytes):
                await send({"type": "websocket.send", "bytes": message})
            else:
                await send({"type": "websocket.send", "text": message})
