"""A task's TCP port carried over a websocket, for the task proxy (task_proxy.py): what Determined's
`python -m determined.cli.tunnel` (the ssh ProxyCommand of `det shell open`) speaks. The caller's
websocket is the ASGI server's (it answers pings and bounds each message before reading it); the
task's port is an asyncio stream. Each message from the caller goes to the port as bytes, and each
read from the port goes back as one binary message; a shell's SSH session runs inside.

Nothing is held beyond one message (MAX_MESSAGE_BYTES) or one read of RELAY_CHUNK_BYTES, and each
direction waits for its socket to drain before taking more, so a slow side slows the other down.
Either side closing closes the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

from services.common.logging import get_logger
from services.master.gateway.asgi_websocket import CLOSE_NORMAL, CLOSE_TOO_BIG, Receive, Send

log = get_logger(__name__)

RELAY_CHUNK_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 10.0
# A message over this closes the tunnel (Determined's tunnel sends 4 KiB; the server's own bound,
# checked before a message is read, is the larger ws_max_size of public_server.py).
MAX_MESSAGE_BYTES = 1024 * 1024
# Open tunnels per task in one process: a shell's port takes callers without a session (the SSH
# key is checked behind it), so their number is bounded here.
MAX_TUNNELS_PER_TASK = 32


class TooManyTunnels(Exception):
    """The task already has its limit of tunnels open."""


class UpstreamError(Exception):
    """The task's port could not be reached."""


class OpenTunnels:
    """Tunnels open per task. Counted on the event loop's thread alone: no lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts: dict[str, int] = {}

    @contextlib.contextmanager
    def held(self, task_id: str) -> Iterator[None]:
        if self._counts.get(task_id, 0) >= self.limit:
            raise TooManyTunnels(f"task {task_id} has {self.limit} tunnels open already; close one first")
        self._counts[task_id] = self._counts.get(task_id, 0) + 1
        try:
            yield
        finally:
            self._counts[task_id] -= 1
            if not self._counts[task_id]:
                del self._counts[task_id]


async def tunnel(receive: Receive, send: Send, host: str, port: int) -> None:
    """Connect to host:port, accept the caller's websocket (its websocket.connect already
    received), then relay until either side ends. UpstreamError when the port did not answer
    (the handshake is not answered then)."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), port), CONNECT_TIMEOUT_S
        )
    except (OSError, TimeoutError) as exc:
        raise UpstreamError(f"the task's port at {host}:{port} did not answer: {exc}") from None
    sock = writer.get_extra_info("socket")
    if sock is not None:
        # A shell sits idle for hours: no timeouts, but keepalives find a vanished agent.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    try:
        await send({"type": "websocket.accept"})
        to_task = asyncio.ensure_future(_caller_to_task(receive, writer))
        to_caller = asyncio.ensure_future(_task_to_caller(reader, send))
        try:
            await asyncio.wait({to_task, to_caller}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (to_task, to_caller):
                task.cancel()
            for task in (to_task, to_caller):
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await task
        close_code = to_task.result() if to_task.done() and not to_task.cancelled() else CLOSE_NORMAL
        if close_code is not None:  # the task's end closed, or the caller broke the bound: say so
            with contextlib.suppress(OSError, RuntimeError):  # the caller may be gone as well
                await send({"type": "websocket.close", "code": close_code})
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _caller_to_task(receive: Receive, writer: asyncio.StreamWriter) -> int | None:
    """Until the caller leaves (None: nothing to tell it) or sends a message over the bound
    (CLOSE_TOO_BIG)."""
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return None
        data = message.get("bytes")
        if data is None:
            data = (message.get("text") or "").encode()
        if len(data) > MAX_MESSAGE_BYTES:
            log.info("tcp tunnel: a message over the bound", size=len(data), limit=MAX_MESSAGE_BYTES)
            return CLOSE_TOO_BIG
        if data:
            writer.write(data)
            await writer.drain()


async def _task_to_caller(reader: asyncio.StreamReader, send: Send) -> None:
    """Until the task's end closes."""
    while data := await reader.read(RELAY_CHUNK_BYTES):
        await send({"type": "websocket.send", "bytes": data})
