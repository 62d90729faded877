"""The public port's bounds (http_limits.py): ordinary requests beyond --http-workers queue, then
get 503; followed streams, proxied exchanges and health checks are served meanwhile; connections
beyond --max-http-connections are refused."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http import HTTPStatus
from urllib.parse import urlsplit

import pytest

from services.master.gateway.http_answers import Response, StreamingResponse
from services.master.gateway.http_limits import HttpLimits
from services.master.gateway.http_request import HttpRequest
from services.master.gateway.public_server import PublicHttpServer, start_public_http


class Routes:
    """A slow ordinary route that holds its turn until released, a followed stream, and a route for
    /proxy/ (there is no task proxy on this server: the path is still one that takes no turn) that
    answer at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def route(self, req: HttpRequest) -> Response | StreamingResponse | None:
        path = urlsplit(req.path).path
        if path == "/slow":
            self.entered.release()
            self.release.wait(10)
            return Response(HTTPStatus.OK, b"slow done")
        if path.endswith("/logs"):
            return StreamingResponse(HTTPStatus.OK, iter([b"line 1\n", b"line 2\n"]), lambda: None)
        if path.startswith("/proxy/"):
            return Response(HTTPStatus.OK, b"proxied")
        return Response(HTTPStatus.OK, b"quick")


Server = PublicHttpServer


@pytest.fixture
def served() -> Iterator[tuple[Server, Routes]]:
    routes = Routes()
    limits = HttpLimits(workers=2, max_connections=6, queue_timeout_s=0.5)
    server = start_public_http("127.0.0.1", 0, limits, None)
    server.routes.append(routes.route)
    yield server, routes
    routes.release.set()
    server.shutdown()
    server.server_close()


def get(server: Server, path: str) -> tuple[int, bytes, str | None]:
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, answer.read(), answer.getheader("Retry-After")
    finally:
        connection.close()


def test_ordinary_requests_beyond_the_workers_queue_then_are_refused_while_streams_flow(
    served: tuple[Server, Routes],
) -> None:
    server, routes = served
    slow_answers: list[tuple[int, bytes, str | None]] = []
    slow = [threading.Thread(target=lambda: slow_answers.append(get(server, "/slow"))) for _ in range(2)]
    for thread in slow:
        thread.start()
    for _ in slow:
        assert routes.entered.acquire(timeout=5)
    # Both turns are taken: one more ordinary request waits its queue time, then is refused.
    status, body, retry_after = get(server, "/api/v1/experiments")
    assert (status, retry_after) == (HTTPStatus.SERVICE_UNAVAILABLE, "1")
    assert b"too many requests at once" in body
    # Streams and the proxy take no turn: served at once.
    assert get(server, "/api/v1/trials/1/logs?follow=true")[:2] == (HTTPStatus.OK, b"line 1\nline 2\n")
    assert get(server, "/proxy/task-1/lab")[:2] == (HTTPStatus.OK, b"proxied")
    assert get(server, "/healthz")[0] == HTTPStatus.OK
    routes.release.set()
    for thread in slow:
        thread.join(10)
    assert [answer[:2] for answer in slow_answers] == [(HTTPStatus.OK, b"slow done")] * 2
    # The turns came back: ordinary requests are served again.
    assert get(server, "/api/v1/experiments")[:2] == (HTTPStatus.OK, b"quick")


def test_connections_beyond_the_limit_are_refused(served: tuple[Server, Routes]) -> None:
    server, _ = served
    port = server.server_address[1]
    held = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(6)]
    try:
        for connection in held:
            connection.request("GET", "/quick")  # keep-alive: each stays open after its answer
            assert connection.getresponse().read() == b"quick"
        status, _, _ = get(server, "/quick")
        assert status == HTTPStatus.SERVICE_UNAVAILABLE
    finally:
        for connection in held:
            connection.close()
    wait = threading.Event()
    for _ in range(50):
        if get(server, "/quick")[0] == HTTPStatus.OK:
            break
        wait.wait(0.1)
    assert get(server, "/quick")[:2] == (HTTPStatus.OK, b"quick")
