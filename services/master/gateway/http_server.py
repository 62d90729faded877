"""The master's HTTP server. Routes are matched in order; later issues add the REST gateway and
the WebUI behind the same server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from services.common.logging import get_logger
from services.master.domain.context import MasterContext
from services.master.gateway import prometheus

log = get_logger(__name__)


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] | None = None


# A route handler gets the request handler (method, path, headers, body reader) and answers.
Route = Callable[["RequestHandler"], Response | None]


class RequestHandler(BaseHTTPRequestHandler):
    server: MasterHttpServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http", request=self.requestline, detail=format % args)

    def _dispatch(self) -> None:
        for route in self.server.routes:
            try:
                response = route(self)
            except Exception:
                log.exception("http handler failed", path=self.path)
                response = Response(HTTPStatus.INTERNAL_SERVER_ERROR, b'{"error": "internal error"}')
            if response is not None:
                self.respond(response)
                return
        self.respond(Response(HTTPStatus.NOT_FOUND, b'{"error": "not found"}'))

    def respond(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for key, value in (response.headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    do_GET = _dispatch
    do_POST = _dispatch
    do_PUT = _dispatch
    do_PATCH = _dispatch
    do_DELETE = _dispatch
    do_HEAD = _dispatch


class MasterHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], routes: list[Route]) -> None:
        super().__init__(address, RequestHandler)
        self.routes = routes


def health_routes(ctx: MasterContext) -> list[Route]:
    def healthz(req: RequestHandler) -> Response | None:
        if req.path.split("?")[0] not in ("/healthz", "/health"):
            return None
        if ctx.db.ping():
            return Response(HTTPStatus.OK, b'{"status": "ok"}')
        return Response(HTTPStatus.SERVICE_UNAVAILABLE, b'{"status": "database unreachable"}')

    def metrics(req: RequestHandler) -> Response | None:
        if req.path.split("?")[0] != "/metrics":
            return None
        return Response(HTTPStatus.OK, prometheus.render(ctx).encode(), "text/plain; version=0.0.4")

    return [healthz, metrics]


def start_http(host: str, port: int, routes: list[Route]) -> tuple[MasterHttpServer, threading.Thread]:
    server = MasterHttpServer((host, port), routes)
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    log.info("http serving", host=host, port=server.server_address[1])
    return server, thread
