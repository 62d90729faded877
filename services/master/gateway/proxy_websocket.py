"""A websocket to a task's service (a Jupyter kernel's channels, TensorBoard's), for the task
proxy (task_proxy.py): the caller's side is the ASGI server's websocket, the service's side a
client of the `websockets` package, and every message is passed on as it is, both ways, until
either side closes; the other is then closed with the same code.

The handshake goes to the service first, with the caller's headers (its Host, Origin, cookies less
the master's session, subprotocols) and the service's credential; the service's refusal is passed
to the caller as its HTTP answer. Both libraries bound a message (MAX_MESSAGE_BYTES) before they
read it, and each waits for its socket to drain before taking the next message (the ASGI server
stops reading the caller while a message waits for the service; `websockets` stops reading the
service while MAX_QUEUE messages wait for the caller), so a slow side slows the other down instead
of filling the master's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.uri import parse_uri

from services.common.logging import get_logger
from services.master.gateway.asgi_websocket import Receive, Scope, Send, refuse, sendable
from services.master.gateway.proxy_headers import (
    HOP_BY_HOP,
    SET_BY_THE_SERVER,
    WEBSOCKET_OWN,
    upstream_headers,
)

log = get_logger(__name__)

CONNECT_TIMEOUT_S = 10.0
# As uvicorn's ws_max_size on the caller's side (public_server.py): a message bigger than this is
# refused on either side, before it is read.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# Messages read from the service ahead of the caller.
MAX_QUEUE = 16


class UpstreamError(Exception):
    """The task's service could not be reached."""


async def relay(
    scope: Scope, receive: Receive, send: Send, host: str, port: int, credential: str | None
) -> None:
    """The caller's websocket (its websocket.connect already received) to host:port; UpstreamError
    when the service did not answer (nothing was sent to the caller then)."""
    raw = upstream_headers(scope, credential=credential, also_drop=WEBSOCKET_OWN)
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string") or b""
    target = (raw_path + (b"?" + query if query else b"")).decode("latin-1")
    try:
        upstream = await connect(
            _uri(scope, host, port, target),
            host=host.strip("[]"),  # where to connect; the URI's authority is the caller's Host
            port=port,
            additional_headers=headers,
            subprotocols=scope.get("subprotocols") or None,
            compression=None,  # messages pass as they are: nothing to inflate and deflate again
            open_timeout=CONNECT_TIMEOUT_S,
            # The caller's side is pinged by the ASGI server; the service is on the agent's network,
            # and a kernel busy in a long cell must not be taken for a dead one.
            ping_interval=None,
            max_size=MAX_MESSAGE_BYTES,
            max_queue=MAX_QUEUE,
            user_agent_header=None,
            proxy=None,  # tasks are reached directly, never through a proxy named in the environment
        )
    except InvalidStatus as exc:
        answer = exc.response
        passed = [
            (k.lower().encode("latin-1"), v.encode("latin-1"))
            for k, v in answer.headers.raw_items()
            if k.lower().encode("latin-1") not in HOP_BY_HOP | SET_BY_THE_SERVER | {b"content-type"}
        ]
        content_type = (answer.headers.get("Content-Type") or "text/plain; charset=utf-8").encode("latin-1")
        await refuse(scope, send, answer.status_code, answer.body or b"", passed, content_type)
        return
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        raise UpstreamError(f"the task's service at {host}:{port} did not answer: {exc}") from None
    _keep_alive(upstream)
    await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
    async with upstream:
        to_service = asyncio.ensure_future(_caller_to_service(receive, upstream))
        to_caller = asyncio.ensure_future(_service_to_caller(upstream, send))
        try:
            await asyncio.wait({to_service, to_caller}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (to_service, to_caller):
                task.cancel()
            for task in (to_service, to_caller):
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed, OSError):
                    await task
        caller_code = to_service.result() if to_service.done() and not to_service.cancelled() else None
        if caller_code is not None:
            await upstream.close(sendable(caller_code))  # the caller left: so does the service's side
    if caller_code is None:
        with contextlib.suppress(OSError, RuntimeError):  # the caller may be gone as well
            await send({"type": "websocket.close", "code": sendable(upstream.close_code)})


def _uri(scope: Scope, host: str, port: int, target: str) -> str:
    """ws://{the caller's Host}{target}: the service sees the Host the browser sent, as for plain
    requests (Jupyter compares it with the page's Origin). The task's address where the caller's
    Host is missing or unusable."""
    caller_host = next((v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"host"), "")
    for authority in (caller_host, f"{host}:{port}"):
        uri = f"ws://{authority}{target}"
        with contextlib.suppress(InvalidURI, ValueError):
            parse_uri(uri)
            return uri
    return f"ws://{host}:{port}{target}"


def _keep_alive(upstream: ClientConnection) -> None:
    # No pings towards the service (see connect()), but TCP keepalives find a vanished agent.
    sock = upstream.transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)


async def _caller_to_service(receive: Receive, upstream: ClientConnection) -> int:
    """Until the caller leaves: its close code."""
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return int(message.get("code") or 1000)
        if message.get("bytes") is not None:
            await upstream.send(message["bytes"])
        elif message.get("text") is not None:
            await upstream.send(message["text"])


async def _service_to_caller(upstream: ClientConnection, send: Send) -> None:
    """Until the service closes (ConnectionClosed ends the iteration)."""
    async for message in upstream:
        if isinstance(message, bytes):
            await send({"type": "websocket.send", "bytes": message})
        else:
            await send({"type": "websocket.send", "text": message})
