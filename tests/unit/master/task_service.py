"""A task's service for the proxy's tests: a real uvicorn server (HTTP and websockets) on a free
port of loopback, in a thread, whose small ASGI app says what it was sent and records what it saw.

GET /.../big streams `big_bytes` as fast as its client takes them (`sent` counts them); GET
/.../idle sends one line and then waits for its client to leave (`departed` is set when the proxy
closes the exchange); POST answers chunked, its body then "-done"; POST /.../digest answers the
size and SHA-256 of the body; any other GET answers repr((path, Authorization, Cookie, Host)) with
two Set-Cookie headers; `exchanges` records each HTTP exchange's path and the address it came
from. A websocket echoes every message (`ws_headers` has its handshake's headers) until its client
leaves (`ws_departed`)."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class TaskService:
    def __init__(self, big_bytes: int = 256 * 1024 * 1024) -> None:
        self.big_bytes = big_bytes
        self.sent = 0
        self.departed = threading.Event()
        self.ws_departed = threading.Event()
        self.ws_headers: dict[str, str] = {}
        # (path, the client's address) of every HTTP exchange: which connection each came on.
        self.exchanges: list[tuple[str, tuple[str, int]]] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            interface="asgi3",
            lifespan="off",
            log_config=None,
            access_log=False,
            ws="websockets-sansio",
            ws_max_size=32 << 20,
            # The peer's own address in `client` (not X-Forwarded-For's, which names no port).
            proxy_headers=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve([self._sock])), daemon=True
        )
        self._thread.start()
        while not self._server.started:
            threading.Event().wait(0.01)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        path: str = scope["path"]
        self.exchanges.append((path, tuple(scope["client"])))
        if scope["method"] == "POST":
            body = b""
            digest = hashlib.sha256()
            size = 0
            while True:
                message = await receive()
                chunk = message.get("body", b"")
                size += len(chunk)
                digest.update(chunk)
                if not path.endswith("/digest"):
                    body += chunk
                if not message.get("more_body"):
                    break
            if path.endswith("/digest"):
                answer = f"{size} {digest.hexdigest()}".encode()
                await _whole(send, 200, answer)
                return
            await send({"type": "http.response.start", "status": 201, "headers": []})  # chunked
            for part in (body, b"-done"):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        if path.endswith("/big"):
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"x/big")]}
            )
            piece = b"x" * 65536
            while self.sent < self.big_bytes:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
                self.sent += len(piece)
            await send({"type": "http.response.body", "body": b""})
            return
        if path.endswith("/idle"):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"first line\n", "more_body": True})
            while (await receive())["type"] != "http.disconnect":
                pass
            self.departed.set()
            return
        query = scope["query_string"].decode()
        body = repr(
            (
                path + (f"?{query}" if query else ""),
                headers.get("authorization"),
                headers.get("cookie"),
                headers.get("host"),
            )
        ).encode()
        extra = [(b"set-cookie", b"a=1"), (b"set-cookie", b"b=2")]
        await _whole(send, 200, body, extra)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # websocket.connect
        self.ws_headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        if self.ws_headers.get("authorization", "").startswith("token refuse"):
            await send({"type": "websocket.close", "code": 1008})  # a refused handshake: 403
            return
        await send({"type": "websocket.accept", "subprotocol": (scope.get("subprotocols") or [None])[0]})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                self.ws_departed.set()
                return
            if message.get("text") == "bye":
                await send({"type": "websocket.close", "code": 4000})
                return
            await send({"type": "websocket.send", "bytes": message.get("bytes"), "text": message.get("text")})


async def _whole(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
