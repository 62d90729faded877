"""Moving one request to a task's service and its answer back, for the task proxy (task_proxy.py):
an HTTP exchange relayed as it streams, or a websocket (any Upgrade) tunnelled byte for byte.

Nothing is held beyond one request body (bounded, MAX_PROXY_BODY_BYTES) and one read of
RELAY_CHUNK_BYTES at a time each way, so a large download or a chatty kernel costs the master a
fixed amount of memory per connection. Each proxied connection keeps the HTTP server's thread it
came on (the server is threaded); a tunnel adds one thread for its second direction.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from http import HTTPStatus

from services.common.logging import get_logger
from services.master.gateway.credentials import AUTH_COOKIE
from services.master.gateway.http_server import Answered, RequestHandler

log = get_logger(__name__)

# Jupyter uploads large files in 1 MiB chunks; a body over this is refused unread.
MAX_PROXY_BODY_BYTES = 32 * 1024 * 1024
RELAY_CHUNK_BYTES = 64 * 1024
CONNECT_TIMEOUT_S = 10.0
# A plain request whose service says nothing for this long is given up (kernel traffic goes over
# websockets, which have no such limit).
RESPONSE_TIMEOUT_S = 300.0

# Headers about one hop, not the exchange (RFC 9110 §7.6.1): never relayed.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)


# send_response writes these itself; the service's copies would repeat them.
_SET_BY_THE_MASTER = frozenset({"server", "date"})


class UpstreamError(Exception):
    """The task's service could not be reached."""


def is_upgrade(req: RequestHandler) -> bool:
    connection = (req.headers.get("Connection") or "").lower()
    return "upgrade" in [part.strip() for part in connection.split(",")] and bool(req.headers.get("Upgrade"))


def _without_session_cookie(header: str) -> str:
    """The Cookie header less the master's session cookie: the task never sees the user's token."""
    kept = [part.strip() for part in header.split(";") if part.strip().split("=", 1)[0] != AUTH_COOKIE]
    return "; ".join(p for p in kept if p)


def upstream_headers(
    req: RequestHandler, *, keep_upgrade: bool, credential: str | None = None
) -> list[tuple[str, str]]:
    """The request's headers as the task's service gets them: without hop-by-hop headers (but an
    upgrade's own), without the master's credentials, with X-Forwarded-* saying who asked, and
    with the service's own credential (`Authorization: token ...`) where it has one."""
    headers: list[tuple[str, str]] = []
    for name, raw in req.headers.items():
        lowered = name.lower()
        value = _without_session_cookie(raw) if lowered == "cookie" else raw
        if lowered == "authorization" or not value:
            continue
        if lowered in _HOP_BY_HOP and not (keep_upgrade and lowered in ("connection", "upgrade")):
            continue
        headers.append((name, value))
    client = req.client_address[0] if req.client_address else ""
    forwarded = req.headers.get("X-Forwarded-For")
    headers.append(("X-Forwarded-For", f"{forwarded}, {client}" if forwarded else client))
    headers.append(("X-Forwarded-Proto", "http"))
    if credential:
        headers.append(("Authorization", f"token {credential}"))
    return headers


def relay_http(
    req: RequestHandler, host: str, port: int, path: str, credential: str | None = None
) -> Answered:
    """Send the request to host:port and stream its answer back as it comes."""
    body = req.read_body(MAX_PROXY_BODY_BYTES)
    conn = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT_S)
    try:
        try:
            conn.connect()
            conn.sock.settimeout(RESPONSE_TIMEOUT_S)
            conn.putrequest(req.command, path, skip_host=True, skip_accept_encoding=True)
            for name, value in upstream_headers(req, keep_upgrade=False, credential=credential):
                conn.putheader(name, value)
            if body or req.command in ("POST", "PUT", "PATCH"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            upstream = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            raise UpstreamError(f"the task's service at {host}:{port} did not answer: {exc}") from None
        return _write_answer(req, upstream)
    finally:
        conn.close()


def _write_answer(req: RequestHandler, upstream: http.client.HTTPResponse) -> Answered:
    status = upstream.status
    no_body = (
        req.command == "HEAD" or status in (HTTPStatus.NO_CONTENT, HTTPStatus.NOT_MODIFIED) or status < 200
    )
    length = upstream.length  # None when the service streams without a length (chunked, or to close)
    chunked = not no_body and length is None and req.request_version != "HTTP/1.0"
    close = not no_body and length is None and not chunked
    req.send_response(status, upstream.reason)
    for name, value in upstream.getheaders():
        if name.lower() not in _HOP_BY_HOP and name.lower() not in _SET_BY_THE_MASTER:
            req.send_header(name, value)
    if no_body:
        if upstream.getheader("Content-Length") is not None:
            req.send_header("Content-Length", upstream.getheader("Content-Length") or "0")
    elif chunked:
        req.send_header("Transfer-Encoding", "chunked")
    elif length is not None:
        req.send_header("Content-Length", str(length))
    if close:
        req.send_header("Connection", "close")
    req.end_headers()
    if no_body:
        return Answered()
    try:
        while True:
            chunk = upstream.read1(RELAY_CHUNK_BYTES)
            if not chunk:
                break
            req.wfile.write(b"%X\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
        if chunked:
            req.wfile.write(b"0\r\n\r\n")
    except (OSError, http.client.HTTPException):
        # Either side went away mid-answer: the client's connection cannot carry another request.
        return Answered(close=True)
    return Answered(close=close)


def tunnel(req: RequestHandler, host: str, port: int, path: str, credential: str | None = None) -> Answered:
    """An upgraded connection (a Jupyter kernel's websocket): the handshake goes to the service,
    then bytes flow both ways until either side closes."""
    try:
        upstream = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise UpstreamError(f"the task's service at {host}:{port} did not answer: {exc}") from None
    head = [f"{req.command} {path} HTTP/1.1"]
    head += [
        f"{name}: {value}" for name, value in upstream_headers(req, keep_upgrade=True, credential=credential)
    ]
    client = req.connection
    try:
        upstream.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        # Kernels sit idle for hours: no read timeouts, but keepalives find a vanished peer.
        for sock in (upstream, client):
            sock.settimeout(None)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            # Messages are relayed as they come: no waiting to coalesce small writes.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pump = threading.Thread(
            target=_client_to_upstream, args=(req, upstream), name="proxy-ws", daemon=True
        )
        pump.start()
        _upstream_to_client(upstream, client)
        pump.join()
    except OSError:
        log.debug("proxy tunnel ended", path=path, exc_info=True)
    finally:
        _close_both(upstream, client)
    return Answered(close=True)


def _client_to_upstream(req: RequestHandler, upstream: socket.socket) -> None:
    # Through rfile: bytes the client sent right after its handshake may already sit in its buffer.
    try:
        while True:
            data = req.rfile.read1(RELAY_CHUNK_BYTES)
            if not data:
                break
            upstream.sendall(data)
    except (OSError, ValueError):
        pass
    finally:
        _close_both(upstream, req.connection)


def _upstream_to_client(upstream: socket.socket, client: socket.socket) -> None:
    try:
        while True:
            data = upstream.recv(RELAY_CHUNK_BYTES)
            if not data:
                break
            client.sendall(data)
    finally:
        _close_both(upstream, client)


def _close_both(upstream: socket.socket, client: socket.socket) -> None:
    """Shut both directions down (which wakes the other pump); the server closes the client."""
    for sock in (upstream, client):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        upstream.close()
