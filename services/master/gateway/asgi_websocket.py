"""What the task proxy's two websocket modules share about the caller's side of a websocket, as
the ASGI server carries it: refusing the handshake with an HTTP answer, and close codes."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

# Close codes (RFC 6455 §7.4.1).
CLOSE_NORMAL = 1000
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011


async def refuse(
    scope: Scope,
    send: Send,
    status: int,
    body: bytes,
    headers: Iterable[tuple[bytes, bytes]] = (),
    content_type: bytes = b"application/json",
) -> None:
    """The handshake refused with an HTTP answer (the ASGI websocket denial extension, which
    uvicorn speaks), so that a client reads the reason as it would for a plain request; a bare
    close where the server cannot."""
    if "websocket.http.response" in (scope.get("extensions") or {}):
        raw = [(b"content-type", content_type), *headers]
        await send({"type": "websocket.http.response.start", "status": status, "headers": raw})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": CLOSE_POLICY})


async def refuse_json(scope: Scope, send: Send, status: int, message: str, headers: dict[str, str]) -> None:
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await refuse(scope, send, status, json.dumps({"error": message}).encode(), raw)


def sendable(code: int | None) -> int:
    """A close code one may send on (RFC 6455 §7.4): 1005, 1006 and 1015 only say what happened to
    a connection. A side that closed without a code is passed on as normal, one that vanished (or
    sent a code nobody may send) as an error."""
    if code is None or code == 1005:
        return CLOSE_NORMAL
    if 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999:
        return code
    return CLOSE_INTERNAL_ERROR
