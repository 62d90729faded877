"""A task's TCP port carried over a websocket, for the task proxy (task_proxy.py): what Determined's
`python -m determined.cli.tunnel` (the ssh ProxyCommand of `det shell open`) speaks. The master
ends the websocket itself: each binary message from the client goes to the task's port as bytes,
and each read from the port goes back as one binary message. A shell's SSH session runs inside.

One thread per direction (the HTTP server's own for client to task, one more for task to client);
nothing is held beyond one frame (websocket_frames.MAX_FRAME_BYTES) or one read of RELAY_CHUNK_BYTES.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

from services.common.logging import get_logger
from services.master.gateway import websocket_frames as wsf
from services.master.gateway.http_server import Answered, RequestHandler

log = get_logger(__name__)

RELAY_CHUNK_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 10.0
# Open tunnels per task: each holds two of the master's threads, and a shell's port takes callers
# without a session (the SSH key is checked behind it), so their number is bounded here.
MAX_TUNNELS_PER_TASK = 32


class TooManyTunnels(Exception):
    """The task already has MAX_TUNNELS_PER_TASK tunnels open."""


class _OpenTunnels:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    @contextlib.contextmanager
    def held(self, task_id: str) -> Iterator[None]:
        with self._lock:
            if self._counts.get(task_id, 0) >= self.limit:
                raise TooManyTunnels(f"task {task_id} has {self.limit} tunnels open already; close one first")
            self._counts[task_id] = self._counts.get(task_id, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._counts[task_id] -= 1
                if not self._counts[task_id]:
                    del self._counts[task_id]


OPEN_TUNNELS = _OpenTunnels(MAX_TUNNELS_PER_TASK)


class UpstreamError(Exception):
    """The task's port could not be reached."""


class _ClientWriter:
    """Frames to the client, one whole frame at a time: both directions write (data one way,
    pongs and the close frame the other)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self.closed = False

    def send(self, opcode: wsf.Opcode, payload: bytes = b"") -> None:
        with self._lock:
            if self.closed:
                return
            self._sock.sendall(wsf.encode_frame(opcode, payload))

    def close(self, code: int, reason: str = "") -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            with contextlib.suppress(OSError):
                self._sock.sendall(wsf.encode_frame(wsf.Opcode.CLOSE, wsf.close_payload(code, reason)))


def handshake_error(req: RequestHandler) -> str | None:
    """Why the request cannot become a TCP tunnel; None when it can."""
    return wsf.handshake_error({name.lower(): value for name, value in req.headers.items()})


def tunnel_tcp(req: RequestHandler, task_id: str, host: str, port: int) -> Answered:
    """Connect to host:port, accept the client's websocket, then relay until either side ends.
    The caller has checked the handshake (handshake_error). TooManyTunnels when the task has its
    fill of them."""
    with OPEN_TUNNELS.held(task_id):
        return _tunnel(req, host, port)


def _tunnel(req: RequestHandler, host: str, port: int) -> Answered:
    try:
        upstream = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise UpstreamError(f"the task's port at {host}:{port} did not answer: {exc}") from None
    client = req.connection
    writer = _ClientWriter(client)
    try:
        client.sendall(wsf.switching_protocols(req.headers["Sec-WebSocket-Key"]))
        # A shell sits idle for hours: no read timeouts, but keepalives find a vanished peer.
        for sock in (upstream, client):
            sock.settimeout(None)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        pump = threading.Thread(
            target=_task_to_client, args=(upstream, client, writer), name="proxy-tcp", daemon=True
        )
        pump.start()
        _client_to_task(req, upstream, writer)
        pump.join()
    except OSError:
        log.debug("tcp tunnel ended", address=f"{host}:{port}", exc_info=True)
    finally:
        _shut(upstream, client)
        with contextlib.suppress(OSError):
            upstream.close()
    return Answered(close=True)


def _client_to_task(req: RequestHandler, upstream: socket.socket, writer: _ClientWriter) -> None:
    """Data frames' payloads to the task; pings answered; a close frame, the end of the
    connection or a broken frame ends the tunnel."""
    try:
        while True:
            frame = wsf.read_frame(req.rfile)
            if frame is None:
                return
            if frame.opcode in wsf.DATA_OPCODES:
                if frame.payload:
                    upstream.sendall(frame.payload)
            elif frame.opcode == wsf.Opcode.PING:
                writer.send(wsf.Opcode.PONG, frame.payload)
            elif frame.opcode == wsf.Opcode.CLOSE:
                writer.close(wsf.CLOSE_NORMAL)
                return
    except wsf.FrameError as exc:
        log.info("tcp tunnel: bad frame from the client", error=str(exc))
        writer.close(exc.code, str(exc))
    except (OSError, ValueError):
        pass
    finally:
        _shut(upstream, req.connection)


def _task_to_client(upstream: socket.socket, client: socket.socket, writer: _ClientWriter) -> None:
    """The task's bytes as binary messages; once the task's end closes, a close frame, and the
    client's connection is shut so that the other direction stops waiting on it."""
    try:
        while True:
            data = upstream.recv(RELAY_CHUNK_BYTES)
            if not data:
                break
            writer.send(wsf.Opcode.BINARY, data)
        writer.close(wsf.CLOSE_NORMAL)
    except OSError:
        pass
    finally:
        _shut(upstream, client)


def _shut(upstream: socket.socket, client: socket.socket) -> None:
    """Shut both directions down (which wakes the other pump); the server closes the client."""
    for sock in (upstream, client):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
