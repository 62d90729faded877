"""The gateway over real sockets: error mapping, NDJSON streams, credentials, cookies,
keep-alive, disconnects and the served OpenAPI document."""

from __future__ import annotations

import http.client
import json
import socket
import time

import grpc
import pytest
import requests

from cairn.api.v1 import api_pb2
from services.master.gateway import asgi_app
from services.master.gateway.http_rules import http_bindings
from services.master.gateway.rest_gateway import ENDING_STREAMS
from tests.unit.gateway.conftest import Gateway

EXPECTED_STATUS = {
    grpc.StatusCode.CANCELLED: (499, "Canceled"),
    grpc.StatusCode.UNKNOWN: (500, "Unknown"),
    grpc.StatusCode.INVALID_ARGUMENT: (400, "InvalidArgument"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "DeadlineExceeded"),
    grpc.StatusCode.NOT_FOUND: (404, "NotFound"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "AlreadyExists"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "PermissionDenied"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "ResourceExhausted"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "FailedPrecondition"),
    grpc.StatusCode.ABORTED: (409, "Aborted"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "OutOfRange"),
    grpc.StatusCode.UNIMPLEMENTED: (501, "Unimplemented"),
    grpc.StatusCode.INTERNAL: (500, "Internal"),
    grpc.StatusCode.UNAVAILABLE: (503, "Unavailable"),
    grpc.StatusCode.DATA_LOSS: (500, "DataLoss"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "Unauthenticated"),
}


@pytest.mark.parametrize("code", list(EXPECTED_STATUS), ids=lambda c: c.name)
def test_grpc_codes_become_http_statuses_and_error_bodies(gateway: Gateway, code: grpc.StatusCode) -> None:
    number = code.value[0]
    response = requests.get(f"{gateway.base}/api/v1/trials/{number}", timeout=10)
    status, reason = EXPECTED_STATUS[code]
    assert response.status_code == status
    assert response.headers["Content-Type"] == "application/json"
    message = f"scripted {code.name}"
    assert response.json() == {
        "error": {"code": number, "reason": reason, "error": message},
        "code": number,
        "message": message,
        "details": [],
    }


def test_unary_json_emits_defaults_and_int64_as_strings(gateway: Gateway) -> None:
    response = requests.get(f"{gateway.base}/api/v1/trials/100", timeout=10)
    trial = response.json()["trial"]
    assert trial["id"] == 100 and trial["totalCheckpointSize"] == str(2**40)
    assert trial["state"] == "STATE_UNSPECIFIED" and trial["taskIds"] == [] and trial["restarts"] == 0
    assert b"\n" not in response.content
    pretty = requests.get(f"{gateway.base}/api/v1/trials/100?pretty", timeout=10)
    assert pretty.json() == response.json() and pretty.text.startswith('{\n  "trial": {')


def test_query_string_reaches_the_service(gateway: Gateway) -> None:
    response = requests.get(
        f"{gateway.base}/api/v1/experiments",
        params=[
            ("states", "STATE_ACTIVE"),
            ("states", "STATE_PAUSED"),
            ("orderBy", "2"),
            ("archived", "true"),
        ],
        timeout=10,
    )
    echoed = json.loads(response.json()["experiments"][0]["description"])
    assert echoed == {
        "states": ["STATE_ACTIVE", "STATE_PAUSED"],
        "order_by": "ORDER_BY_DESC",
        "archived": True,
    }


def test_stream_is_ndjson_and_ends_with_the_error_line(gateway: Gateway) -> None:
    ok = requests.get(f"{gateway.base}/api/v1/trials/5/logs?limit=3", stream=True, timeout=10)
    assert ok.status_code == 200 and ok.headers["Transfer-Encoding"] == "chunked"
    assert ok.headers["Content-Type"] == "application/json"
    lines = [json.loads(line) for line in ok.iter_lines()]
    assert [line["result"]["message"] for line in lines] == ["line 0\n", "line 1\n", "line 2\n"]
    assert lines[0]["result"]["trialId"] == 5 and lines[0]["result"]["level"] == "LOG_LEVEL_UNSPECIFIED"

    failed = requests.get(f"{gateway.base}/api/v1/trials/5/logs?limit=2&searchText=fail", timeout=10)
    assert failed.status_code == 200
    *results, last = [json.loads(line) for line in failed.text.splitlines()]
    assert len(results) == 2
    assert last == {
        "error": {
            "grpcCode": 5,
            "httpCode": 404,
            "message": "the trial went away",
            "httpStatus": "Not Found",
            "details": [],
        }
    }


def test_a_stream_past_the_read_ahead_streams_on_in_order_and_ends_as_it_would(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Short streams are read whole before the answer starts; a longer one goes on as a stream.
    monkeypatch.setattr(asgi_app, "READ_AHEAD_BYTES", 300)
    expected = [f"line {i}\n" for i in range(40)]
    for limit in (2, 40):
        response = requests.get(f"{gateway.base}/api/v1/trials/5/logs?limit={limit}", stream=True, timeout=10)
        assert response.status_code == 200 and response.headers["Transfer-Encoding"] == "chunked"
        lines = [json.loads(line) for line in response.iter_lines()]
        assert [line["result"]["message"] for line in lines] == expected[:limit]
    failed = requests.get(f"{gateway.base}/api/v1/trials/5/logs?limit=40&searchText=fail", timeout=10)
    *results, last = [json.loads(line) for line in failed.text.splitlines()]
    assert [r["result"]["message"] for r in results] == expected
    assert last["error"]["message"] == "the trial went away"


def test_a_stream_failing_before_its_first_message_is_an_ordinary_error(gateway: Gateway) -> None:
    response = requests.get(f"{gateway.base}/api/v1/trials/5/logs?limit=0&searchText=fail", timeout=10)
    assert response.status_code == 404 and response.json()["error"]["error"] == "the trial went away"
    empty = requests.get(f"{gateway.base}/api/v1/trials/5/logs?limit=0", timeout=10)
    assert empty.status_code == 200 and empty.content == b""


def test_a_client_disconnect_cancels_the_grpc_stream(gateway: Gateway) -> None:
    gateway.observed.cancelled.clear()
    port = gateway.http.server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /api/v1/trials/5/logs?limit=1&follow=true HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        deadline = time.monotonic() + 10
        while b"line 0" not in received and time.monotonic() < deadline:
            received += sock.recv(4096)
        assert b"line 0" in received
    # The stream is idle (no new lines): only the disconnect watch can notice the client left.
    assert gateway.observed.cancelled.wait(timeout=10)


def _follow(port: int, trial_id: int) -> socket.socket:
    """A connection whose followed stream of trial `trial_id` has sent its first line."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(
        f"GET /api/v1/trials/{trial_id}/logs?limit=1&follow=true HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    )
    received = b""
    deadline = time.monotonic() + 10
    while b"line 0" not in received and time.monotonic() < deadline:
        received += sock.recv(4096)
    assert b"line 0" in received
    return sock


def test_a_client_that_sends_its_next_request_keeps_its_stream(gateway: Gateway) -> None:
    port = gateway.http.server_address[1]
    gateway.observed.cancelled_trials.discard(41)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        # A stream that ends on its own, then a followed one, on the same keep-alive connection.
        sock.sendall(b"GET /api/v1/trials/5/logs?limit=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        while not received.endswith(b"0\r\n\r\n"):
            received += sock.recv(4096)
        sock.sendall(
            b"GET /api/v1/trials/41/logs?limit=1&follow=true&searchText=briefly HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        received = b""
        while b"line 0" not in received:
            received += sock.recv(4096)
        # The next request, pipelined: the client is still there, its stream goes on to its end,
        # then the next request is answered on the same connection.
        sock.sendall(b"GET /api/v1/master HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(1)
        assert 41 not in gateway.observed.cancelled_trials
        while b"scripted" not in received:
            received += sock.recv(4096)
        assert received.count(b"HTTP/1.1 200") == 2
    assert 41 not in gateway.observed.cancelled_trials


def test_many_streams_at_once_each_see_only_their_own_client_leave(gateway: Gateway) -> None:
    port = gateway.http.server_address[1]
    trial_ids = list(range(200, 210))  # the scripted service has 16 threads; each stream holds one
    socks = {trial_id: _follow(port, trial_id) for trial_id in trial_ids}
    leaving = [t for t in trial_ids if t % 2 == 0]
    for trial_id in leaving:
        socks.pop(trial_id).close()
    deadline = time.monotonic() + 10
    while not set(leaving) <= gateway.observed.cancelled_trials and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(leaving) <= gateway.observed.cancelled_trials
    assert not set(socks) & gateway.observed.cancelled_trials  # those still there stream on
    for sock in socks.values():
        sock.close()


def test_credentials_and_grpc_metadata_headers_are_forwarded(gateway: Gateway) -> None:
    headers = {
        "Authorization": "Bearer abc",
        "Grpc-Metadata-X-Allocation-Token": "Bearer alloc",
        "Cookie": "auth=ignored-when-authorization-is-present",
    }
    requests.get(f"{gateway.base}/api/v1/trials/100", headers=headers, timeout=10)
    seen = gateway.observed.last_metadata
    assert seen["authorization"] == "Bearer abc" and seen["x-allocation-token"] == "Bearer alloc"
    assert seen["x-forwarded-for"] == "127.0.0.1"
    for header in ("Grpc-Metadata-Bad$Key", "Grpc-Metadata-Grpc-Status"):
        bad = requests.get(f"{gateway.base}/api/v1/trials/100", headers={header: "x"}, timeout=10)
        assert bad.status_code == 400 and header.lower() in bad.json()["message"].lower()


def test_login_sets_the_cookie_and_the_cookie_authenticates(gateway: Gateway) -> None:
    session = requests.Session()
    wrong = session.post(
        f"{gateway.base}/api/v1/auth/login", json={"username": "ann", "password": "no"}, timeout=10
    )
    assert wrong.status_code == 401 and "Set-Cookie" not in wrong.headers
    assert session.get(f"{gateway.base}/api/v1/me", timeout=10).status_code == 401
    login = session.post(
        f"{gateway.base}/api/v1/auth/login", json={"username": "ann", "password": "right"}, timeout=10
    )
    assert login.status_code == 200 and login.json()["token"] == "token-of-ann"
    cookie = login.headers["Set-Cookie"]
    assert cookie.startswith("auth=token-of-ann;") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    me = session.get(f"{gateway.base}/api/v1/me", timeout=10)  # the cookie alone
    assert me.status_code == 200 and me.json()["user"]["username"] == "ann"
    logout = session.post(f"{gateway.base}/api/v1/auth/logout", timeout=10)
    assert logout.status_code == 200 and "Max-Age=0" in logout.headers["Set-Cookie"]
    assert gateway.observed.last_metadata["authorization"] == "Bearer token-of-ann"
    assert "auth" not in session.cookies


def test_unknown_paths_wrong_methods_and_bad_bodies(gateway: Gateway) -> None:
    missing = requests.get(f"{gateway.base}/api/v1/no/such/thing", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["reason"] == "NotFound"
    wrong = requests.put(f"{gateway.base}/api/v1/master", timeout=10)
    assert wrong.status_code == 405 and wrong.headers["Allow"] == "GET"
    bad = requests.post(f"{gateway.base}/api/v1/auth/login", data=b"{oops", timeout=10)
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["error"]
    other = requests.get(f"{gateway.base}/healthz-not-mine", timeout=10)
    assert other.status_code == 404  # outside /api/: not the gateway's


def test_keep_alive_serves_many_requests_on_one_connection(gateway: Gateway) -> None:
    port = gateway.http.server_address[1]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        for i in range(5):
            # A body on a bodiless route must be read too, or it would be taken for the next request.
            connection.request("POST", "/api/v1/auth/logout", body=b"ignored")
            assert connection.getresponse().read() == b"{}"
            connection.request("GET", f"/api/v1/trials/5/logs?limit={i + 1}")
            response = connection.getresponse()
            assert len(response.read().splitlines()) == i + 1
        assert connection.sock is not None  # never reconnected
    finally:
        connection.close()


def test_the_openapi_document_is_served_on_both_paths(gateway: Gateway) -> None:
    ours = requests.get(f"{gateway.base}/api/v1/openapi.json", timeout=10)
    determined = requests.get(f"{gateway.base}/api/v1/api.swagger.json", timeout=10)
    assert ours.status_code == determined.status_code == 200
    assert ours.json() == determined.json() and ours.json()["openapi"].startswith("3.0")


def test_chunked_request_bodies_and_http_1_0_streams(gateway: Gateway) -> None:
    port = gateway.http.server_address[1]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        parts = iter([b'{"username": "ann",', b' "password": "right"}'])
        connection.request("POST", "/api/v1/auth/login", body=parts, encode_chunked=True)
        response = connection.getresponse()
        assert response.status == 200 and json.loads(response.read())["token"] == "token-of-ann"
    finally:
        connection.close()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        # HTTP/1.0 has no chunked encoding: the stream comes whole, with its length, then the close.
        sock.sendall(b"GET /api/v1/trials/5/logs?limit=2 HTTP/1.0\r\n\r\n")
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower() and b"connection: close" in head.lower()
    assert [json.loads(line)["result"]["id"] for line in body.splitlines()] == ["0", "1"]


def test_a_followed_stream_needs_http_1_1(gateway: Gateway) -> None:
    with socket.create_connection(("127.0.0.1", gateway.http.server_address[1]), timeout=10) as sock:
        sock.sendall(b"GET /api/v1/trials/5/logs?limit=1&follow=true HTTP/1.0\r\n\r\n")
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 505") and b"needs HTTP/1.1" in body


def test_a_stalled_body_gives_its_turn_back(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asgi_app, "BODY_IDLE_TIMEOUT_S", 0.5)
    with socket.create_connection(("127.0.0.1", gateway.http.server_address[1]), timeout=10) as sock:
        sock.sendall(b"POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(4096)
    assert received.startswith(b"HTTP/1.1 408")


def test_only_streams_that_end_on_their_own_are_read_ahead() -> None:
    bindings = http_bindings(api_pb2.DESCRIPTOR.services_by_name["Cairn"])
    streams = {b.rpc.name for b in bindings if b.rpc.server_streaming}
    assert streams >= ENDING_STREAMS, "a name that is no stream (misspelt?)"
    # These wait for what happens next: read ahead, they would not be answered until they ended.
    assert not ENDING_STREAMS & {"TrialsSample", "WatchAllocationSignals"}


def test_determined_legacy_tasks_route_answers_the_map_alone(gateway: Gateway) -> None:
    """GET /tasks (outside /api/, as Determined's master serves it, polled by its e2e suite while
    checkpoint GC runs): the allocations by id, not wrapped in a response message."""
    response = requests.get(f"{gateway.base}/tasks", timeout=10)
    assert response.status_code == 200
    body = response.json()
    assert body["a.1"]["name"] == "Checkpoint GC (Experiment 1)" and body["a.1"]["taskId"] == "a"
    assert requests.get(f"{gateway.base}/tasks/extra", timeout=10).status_code != 200
    # A browser opening the WebUI's own /tasks page is not answered with the data (here, with no
    # WebUI, it falls through to the not-found answer).
    page = requests.get(f"{gateway.base}/tasks", headers={"Accept": "text/html,*/*;q=0.8"}, timeout=10)
    assert page.status_code == 404 and "a.1" not in page.text
