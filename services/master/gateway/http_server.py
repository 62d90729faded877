"""The master's threaded HTTP server, on loopback behind the public port (public_server.py): it
serves what must own its socket (the task proxy's answers as the task sent them, websocket and TCP
tunnels) and /healthz and /metrics for the worker processes. Routes are matched in order; each
either answers or passes. The types here (Response, StreamingResponse, BodyError) are shared with
the public ASGI server.

HTTP/1.1 with keep-alive: every answer carries a Content-Length or is chunked, and every request
body is read to its end (or the connection is closed), so clients that reuse connections
(requests.Session, browsers) see one answer per request. Streamed answers are chunked, one chunk
per message, and a client that goes away cancels the producer behind the stream.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cairn import DETERMINED_API_VERSION, __version__
from services.common.logging import get_logger
from services.master.domain.kernel.context import MasterContext
from services.master.gateway import prometheus
from services.master.gateway.disconnects import DisconnectWatcher
from services.master.gateway.http_limits import ConnectionCount, HttpLimits, RequestTurns, is_long_lived
from services.master.gateway.http_request import HttpRequest

log = get_logger(__name__)

# Model definitions travel as base64 JSON: 128 MiB of gRPC message is about 171 MiB of text. Only
# the calls that carry them may send this much (rest_gateway.py's LARGE_BODY_RPCS).
MAX_BODY_BYTES = 192 * 1024 * 1024
# Every other call: the largest real bodies (metric batches, checkpoint file lists, a 1 MiB config
# with its notes) are a few MiB; a body over this is refused from its Content-Length, unread.
MAX_REQUEST_BODY_BYTES = 16 * 1024 * 1024
# Unread bodies smaller than this are drained to keep the connection; larger ones close it.
_DRAIN_LIMIT = 1024 * 1024


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] | None = None


@dataclass
class StreamingResponse:
    """An answer written as it is produced: each item of `chunks` goes out at once, as one chunk.

    `cancel` stops the producer (it is called from another thread when the client disconnects);
    `chunks` is closed in every case once the answer ends. `read_ahead`: the stream ends on its own
    without waiting for anything to happen (a trial's metrics, logs not followed), so the server
    may read it ahead and answer it whole when it is short; never for a stream that waits (a
    followed log, periodic samples), which would not be answered at all until it ended.
    """

    status: int
    chunks: Iterator[bytes]
    cancel: Callable[[], None]
    content_type: str = "application/json"
    headers: dict[str, str] | None = None
    read_ahead: bool = False


@dataclass
class Answered:
    """The route wrote its answer itself (the task proxy: upstream headers as they came, or a
    websocket tunnel); `close` ends the connection after it, as a tunnel or an answer whose end
    only the closing connection marks must."""

    close: bool = False


class BodyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# A route handler gets the request handler (method, path, headers, body reader) and answers, or
# returns None to let the next route try. A Route may write to the socket itself (Answered): such
# routes run on this threaded server only. A PlainRoute needs no socket, so it runs on the public
# ASGI server (asgi_app.py) as well.
Route = Callable[["RequestHandler"], Response | StreamingResponse | Answered | None]
PlainRoute = Callable[[HttpRequest], Response | StreamingResponse | None]


class RequestHandler(BaseHTTPRequestHandler):
    server: MasterHttpServer
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes; with Nagle on, the second one waits for the
    # client's delayed ACK (~40 ms) on reused connections.
    disable_nagle_algorithm = True
    # Idle keep-alive connections (and stalled clients) give their thread back after this.
    timeout = 300

    _body: bytes | None = None
    # Whether this request holds one of the server's turns for ordinary requests (http_limits.py).
    _has_turn: bool = False

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http", request=self.requestline, detail=format % args)

    def read_body(self, limit: int = MAX_REQUEST_BODY_BYTES) -> bytes:
        """The request body (read once, then cached); BodyError when it is malformed or over
        `limit` bytes, which is known from Content-Length before anything is read (or, chunked,
        from the chunk sizes before each chunk is read)."""
        if self._body is not None:
            return self._body
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self._body = self._read_chunked(limit)
            return self._body
        raw_length = self.headers.get("Content-Length")
        try:
            length = int(raw_length) if raw_length else 0
        except ValueError:
            self.close_connection = True
            raise BodyError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {raw_length!r}") from None
        if length < 0:
            self.close_connection = True
            raise BodyError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {raw_length!r}")
        if length > limit:
            self.close_connection = True
            raise BodyError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"request body of {length} bytes is over this call's limit of {limit} bytes",
            )
        data = self.rfile.read(length) if length else b""
        if len(data) != length:
            self.close_connection = True
            raise BodyError(HTTPStatus.BAD_REQUEST, "request body shorter than its Content-Length")
        self._body = data
        return data

    def _read_chunked(self, limit: int) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self.close_connection = True
                raise BodyError(HTTPStatus.BAD_REQUEST, "malformed chunked request body") from None
            total += size
            if total > limit:
                self.close_connection = True
                message = f"request body over this call's limit of {limit} bytes"
                raise BodyError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, message)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def _finish_body(self) -> None:
        """Leave the connection at the start of the next request."""
        if self._body is not None or self.close_connection:
            return
        chunked = "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if chunked or length < 0 or length > _DRAIN_LIMIT:
            self.close_connection = True
        elif length:
            self.rfile.read(length)

    def leave_turns(self) -> None:
        """This request turns into a long-lived exchange (a stream): it gives back its turn, so
        that it neither waits for ordinary requests nor makes them wait."""
        if self._has_turn:
            self._has_turn = False
            self.server.turns.give_back()

    def _dispatch(self) -> None:
        self._body = None
        if not is_long_lived(self.path, self.headers):
            if not self.server.turns.take():
                self._finish_body()
                body = b'{"error": "the master is busy: too many requests at once; retry shortly"}'
                self.respond(Response(HTTPStatus.SERVICE_UNAVAILABLE, body, headers={"Retry-After": "1"}))
                return
            self._has_turn = True
        try:
            for route in self.server.routes:
                try:
                    response = route(self)
                except BodyError as exc:
                    response = Response(exc.status, json.dumps({"error": exc.message}).encode())
                except Exception:
                    log.exception("http handler failed", path=self.path)
                    response = Response(HTTPStatus.INTERNAL_SERVER_ERROR, b'{"error": "internal error"}')
                if response is None:
                    continue
                if isinstance(response, Answered):
                    self.close_connection = self.close_connection or response.close
                    return
                self._finish_body()
                if isinstance(response, StreamingResponse):
                    self.leave_turns()
                    self.respond_stream(response)
                else:
                    self.respond(response)
                return
            self._finish_body()
            self.respond(Response(HTTPStatus.NOT_FOUND, b'{"error": "not found"}'))
        finally:
            self._body = None
            self.leave_turns()

    def respond(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for key, value in (response.headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    def respond_stream(self, response: StreamingResponse) -> None:
        chunked = self.request_version != "HTTP/1.0"
        watching = False
        finished = False
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            for key, value in (response.headers or {}).items():
                self.send_header(key, value)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.close_connection = True  # an HTTP/1.0 stream ends when the connection does
                self.send_header("Connection", "close")
            self.end_headers()
            self.server.disconnects.watch(self.connection, response.cancel)
            watching = True
            for chunk in response.chunks:
                if chunk:
                    self.wfile.write(b"%X\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
            finished = True
        except OSError:
            self.close_connection = True  # the client went away mid-stream
        finally:
            if watching:
                self.server.disconnects.unwatch(self.connection)
            if not finished:
                response.cancel()  # the producer must not run on for nobody
            close = getattr(response.chunks, "close", None)
            if close is not None:
                close()

    do_GET = _dispatch
    do_POST = _dispatch
    do_PUT = _dispatch
    do_PATCH = _dispatch
    do_DELETE = _dispatch
    do_HEAD = _dispatch
    do_OPTIONS = _dispatch


_TOO_MANY_CONNECTIONS = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    b"Retry-After: 1\r\nContent-Length: 44\r\n\r\nthe master has too many connections; retry.\n"
)


class MasterHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Bursts of clients connecting at once must not overflow the listen backlog (default 5),
    # which costs them a SYN retransmit (a second or more).
    request_queue_size = 1024

    def __init__(
        self,
        address: tuple[str, int],
        routes: list[Route],
        limits: HttpLimits | None = None,
    ) -> None:
        super().__init__(address, RequestHandler)
        limits = limits or HttpLimits()
        self.turns = RequestTurns(limits.workers, limits.queue_timeout_s)
        self.connections = ConnectionCount(limits.max_connections)
        self.routes = routes
        self.disconnects = DisconnectWatcher()
        # Run by server_close: routes that hold resources (channels) register their cleanup here.
        self.close_hooks: list[Callable[[], None]] = []

    def server_close(self) -> None:
        super().server_close()
        self.disconnects.close()
        for hook in self.close_hooks:
            with contextlib.suppress(Exception):
                hook()

    def process_request(self, request: Any, client_address: Any) -> None:
        # On the accepting thread: a connection over the limit costs no thread.
        if not self.connections.try_open():
            log.warning("http connection refused: too many open", client=str(client_address))
            with contextlib.suppress(OSError):
                request.setblocking(False)
                request.send(_TOO_MANY_CONNECTIONS)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.closed()  # no thread started to count it down
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connections.closed()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("http connection error", client=str(client_address), exc_info=True)


def master_info(ctx: MasterContext) -> dict[str, Any]:
    """What /info answers: the same in every process that serves the public port."""
    return {
        # The Determined API level (what its clients compare themselves with), and Cairn's own.
        "version": DETERMINED_API_VERSION,
        "cairn_version": __version__,
        "master_id": ctx.master_id,
        "cluster_id": ctx.cluster_id,
        "cluster_name": ctx.settings.cluster_name,
        "telemetry": {"enabled": False},
        "product": "cairn",
    }


def info_route(info: dict[str, Any]) -> PlainRoute:
    body = json.dumps(info).encode()

    def info_answer(req: HttpRequest) -> Response | None:
        # Determined's clients ask /info (outside the API) for the master's version before anything.
        if req.path.split("?")[0] != "/info":
            return None
        return Response(HTTPStatus.OK, body)

    return info_answer


def health_routes(ctx: MasterContext) -> list[PlainRoute]:
    """/healthz and /metrics: they read the master's in-process state, so they run in the master's
    process (worker processes relay them there)."""

    def healthz(req: HttpRequest) -> Response | None:
        if req.path.split("?")[0] not in ("/healthz", "/health"):
            return None
        if ctx.db.ping():
            return Response(HTTPStatus.OK, b'{"status": "ok"}')
        return Response(HTTPStatus.SERVICE_UNAVAILABLE, b'{"status": "database unreachable"}')

    def metrics(req: HttpRequest) -> Response | None:
        if req.path.split("?")[0] != "/metrics":
            return None
        return Response(HTTPStatus.OK, prometheus.render(ctx).encode(), "text/plain; version=0.0.4")

    return [healthz, metrics]


def start_http(
    host: str,
    port: int,
    routes: list[Route],
    limits: HttpLimits | None = None,
) -> tuple[MasterHttpServer, threading.Thread]:
    """Serve on host:port, plain HTTP: the master binds it on loopback only, behind its public
    port (public_server.py), which carries TLS."""
    server = MasterHttpServer((host, port), routes, limits)
    thread = threading.Thread(target=server.serve_forever, name="http-loopback", daemon=True)
    thread.start()
    log.info("http loopback listener serving", host=host, port=server.server_address[1])
    return server, thread
