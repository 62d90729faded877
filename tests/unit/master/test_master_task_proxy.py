"""The master's task proxy, on the real public port in front of a real service (a uvicorn server),
served by the master's own process and by a worker process that asks the master's internal gateway
service over gRPC: it answers only with a session, only for the task's owner or an admin, and only
while the task runs; it relays HTTP answers as the service gives them (status, repeated headers,
streamed bodies) without the user's credentials, streams bodies both ways within its bounds, lets a
slow client hold the service back instead of buffering, ends the exchange when the client leaves,
and relays websockets message by message."""

from __future__ import annotations

import hashlib
import http.client
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import requests
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect as ws_connect

from cairn.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cairn.metadata_keys import GATEWAY_KEY_KEY
from services.common.principal import Principal
from services.master.domain.allocations import task_services
from services.master.domain.identity import roles
from services.master.domain.identity.grants import Grants
from services.master.domain.kernel.errors import Unauthenticated
from services.master.domain.kernel.states import TaskKind
from services.master.domain.tasks import tasks
from services.master.gateway import proxy_http
from services.master.gateway.proxy_targets import LocalTargets
from services.master.gateway.public_server import PublicHttpServer
from services.master.gateway.task_proxy import split_proxy_path
from services.master.store import models
from tests.unit.master.domain.harness import Master
from tests.unit.master.proxy_fronts import KINDS, gateway_service, proxy_front
from tests.unit.master.task_service import TaskService

# Another user, an Editor everywhere: may read the task, not open another's (identity/roles.py).
AN_EDITOR = Grants(roles.EDITOR.permissions, {})


class Cluster:
    def __init__(
        self, master: Master, front: PublicHttpServer, sessions: dict[str, Principal], kind: str
    ) -> None:
        self.master = master
        self.front = front
        self.sessions = sessions
        self.kind = kind
        self.port = front.server_address[1]


@pytest.fixture(params=KINDS)
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    master = Master(tmp_path / "master")
    sessions: dict[str, Principal] = {"admin-token": master.admin}

    def authenticate(token: str) -> Principal:
        if token not in sessions:
            raise Unauthenticated("invalid credentials: unknown or revoked token")
        return sessions[token]

    try:
        with proxy_front(request.param, master, LocalTargets(master.ctx, authenticate)) as front:
            yield Cluster(master, front, sessions, request.param)
    finally:
        master.close()


@pytest.fixture
def service() -> Iterator[TaskService]:
    served = TaskService()
    yield served
    served.close()


def serving_notebook(master: Master, service: TaskService) -> str:
    """A notebook whose allocation reported ready, with the service on its recorded port."""
    master.add_agent("a1")
    task_id = master.launch(TaskKind.NOTEBOOK)
    with master.db.read() as s:
        alloc_id = s.query(models.Allocation).filter_by(task_id=task_id).one().id
    master.run_containers(alloc_id)
    task_services.report_ready(master.ctx, Principal(allocation_id=alloc_id), alloc_id)
    with master.ctx.unit_of_work() as w:  # the service's real port, as the task would listen on it
        w.session.get_one(models.Allocation, alloc_id).proxy_address = f"127.0.0.1:{service.port}"
    return task_id


def request(
    cluster: Cluster, method: str, path: str, headers: dict[str, str], body: bytes | None = None
) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", cluster.port, timeout=10)
    conn.request(method, path, body=body, headers=headers)
    return conn.getresponse()


def get_with_session(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-token\r\n\r\n".encode()


def test_proxy_paths_name_their_task() -> None:
    assert split_proxy_path("/proxy/abc/lab?x=1") == ("abc", "/proxy/abc/lab?x=1")
    assert split_proxy_path("/proxy/abc") == ("abc", "/proxy/abc")
    assert split_proxy_path("/proxy/") is None
    assert split_proxy_path("/api/v1/tasks") is None


def test_a_trials_port_is_named_by_its_task_and_port_the_colon_escaped_or_not() -> None:
    assert split_proxy_path("/proxy/3.ab-cd:8000/x") == ("3.ab-cd:8000", "/proxy/3.ab-cd:8000/x")
    assert split_proxy_path("/proxy/3.ab-cd%3A8000/") == ("3.ab-cd:8000", "/proxy/3.ab-cd%3A8000/")


def test_the_proxy_relays_for_the_owner_without_their_credentials(
    cluster: Cluster, service: TaskService
) -> None:
    task_id = serving_notebook(cluster.master, service)
    with cluster.master.db.read() as s:
        token_hash = s.query(models.Allocation).filter_by(task_id=task_id).one().token_hash
    path = f"/proxy/{task_id}/api/status?x=1"
    answer = request(cluster, "GET", path, {"Authorization": "Bearer admin-token", "Cookie": "auth=t; k=v"})
    body = answer.read().decode()
    assert answer.status == 200
    assert answer.headers.get_all("Set-Cookie") == ["a=1", "b=2"]
    sent_path, authorization, cookie, host = eval(body)
    # The user's session never reaches the task; the notebook gets only its own credential.
    assert (sent_path, authorization, cookie) == (path, f"token {token_hash}", "k=v")
    assert host == f"127.0.0.1:{cluster.port}"  # the browser's Host, for Jupyter's checks
    # The WebUI's cookie is a session too; a streamed (chunked) answer streams through.
    posted = request(
        cluster, "POST", f"/proxy/{task_id}/api/kernels", {"Cookie": "auth=admin-token"}, b"hello"
    )
    assert posted.getheader("Transfer-Encoding") == "chunked"
    assert (posted.status, posted.read()) == (201, b"hello-done")


def test_requests_one_after_another_do_not_stall(cluster: Cluster, service: TaskService) -> None:
    # A service that writes its answers' heads and bodies apart without TCP_NODELAY (as
    # http.server and werkzeug do) stalls each answer ~40 ms for a delayed ACK on a connection the
    # proxy reused; on a new one (quick-ACK mode) it does not. So the proxy keeps none: each
    # exchange comes on a connection of its own, however the caller reuses its own. (The stall's
    # milliseconds are bench/notebook_proxy.py's to measure, not a unit test's.)
    task_id = serving_notebook(cluster.master, service)
    session = requests.Session()
    session.headers["Authorization"] = "Bearer admin-token"
    for _ in range(15):
        assert session.get(f"http://127.0.0.1:{cluster.port}/proxy/{task_id}/api/status", timeout=10).ok
    connections = [client for path, client in service.exchanges if path.endswith("/api/status")]
    assert len(connections) == 15 and len(set(connections)) == 15, connections


def test_the_proxy_refuses_without_a_session_or_for_another_user(
    cluster: Cluster, service: TaskService
) -> None:
    task_id = serving_notebook(cluster.master, service)
    cluster.sessions["other-token"] = Principal(user_id=9999, username="other", grants=AN_EDITOR)
    anonymous = request(cluster, "GET", f"/proxy/{task_id}/lab", {})
    assert anonymous.status == 401 and b"authentication required" in anonymous.read()
    bad = request(cluster, "GET", f"/proxy/{task_id}/lab", {"Authorization": "Bearer nope"})
    assert bad.status == 401 and b"unknown or revoked" in bad.read()
    other = request(cluster, "GET", f"/proxy/{task_id}/lab", {"Authorization": "Bearer other-token"})
    assert other.status == 403 and b"another user" in other.read()
    missing = request(cluster, "GET", "/proxy/nope/lab", {"Authorization": "Bearer admin-token"})
    assert missing.status == 404 and missing.getheader("Content-Type") == "application/json"
    # A websocket is refused the same, with the same JSON reason as its HTTP answer.
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(f"ws://127.0.0.1:{cluster.port}/proxy/{task_id}/api/kernels/k/channels", open_timeout=10)
    assert refused.value.response.status_code == 401
    assert b"authentication required" in (refused.value.response.body or b"")


def test_the_proxy_says_503_while_the_service_is_not_ready(cluster: Cluster, service: TaskService) -> None:
    task_id = serving_notebook(cluster.master, service)
    with cluster.master.ctx.unit_of_work() as w:
        w.session.query(models.Allocation).filter_by(task_id=task_id).one().is_ready = False
    answer = request(cluster, "GET", f"/proxy/{task_id}/lab", {"Authorization": "Bearer admin-token"})
    assert answer.status == 503 and answer.getheader("Retry-After") == "1"
    assert b"not ready yet" in answer.read()


def test_bodies_stream_both_ways_within_the_bound(cluster: Cluster, service: TaskService) -> None:
    task_id = serving_notebook(cluster.master, service)
    auth = {"Authorization": "Bearer admin-token"}
    body = secrets.token_bytes(5 * 1024 * 1024)
    digest = request(cluster, "POST", f"/proxy/{task_id}/upload/digest", auth, body).read().decode()
    assert digest == f"{len(body)} {hashlib.sha256(body).hexdigest()}"
    chunked = requests.post(
        f"http://127.0.0.1:{cluster.port}/proxy/{task_id}/upload/digest",
        data=iter([body[:1000], body[1000:]]),  # no length: sent chunked, and relayed so
        headers=auth,
        timeout=10,
    )
    assert chunked.text == digest
    # A body over the bound is refused from its Content-Length, unread.
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=10) as sock:
        sock.sendall(
            f"POST /proxy/{task_id}/upload/digest HTTP/1.1\r\nHost: x\r\n"
            "Authorization: Bearer admin-token\r\n"
            f"Content-Length: {proxy_http.MAX_PROXY_BODY_BYTES + 1}\r\n\r\n".encode()
        )
        answer = b""
        while chunk := sock.recv(65536):  # the refusal closes the connection: its body is unread
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 413") and b"over the proxy's limit" in answer


def test_a_chunked_body_over_the_bound_is_refused(
    tmp_path: Path, service: TaskService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy_http, "MAX_PROXY_BODY_BYTES", 1000)  # in this process: the master's kind
    master = Master(tmp_path / "master")
    try:
        targets = LocalTargets(master.ctx, lambda token: master.admin)
        with proxy_front("master", master, targets) as front:
            task_id = serving_notebook(master, service)
            refused = requests.post(
                f"http://127.0.0.1:{front.server_address[1]}/proxy/{task_id}/upload/digest",
                data=iter([b"x" * 800, b"x" * 800]),
                headers={"Authorization": "Bearer t"},
                timeout=10,
            )
            assert refused.status_code == 413 and "over the proxy's limit" in refused.json()["error"]
    finally:
        master.close()


def test_a_slow_client_holds_the_service_back(cluster: Cluster, service: TaskService) -> None:
    task_id = serving_notebook(cluster.master, service)
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(get_with_session(f"/proxy/{task_id}/big"))
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        time.sleep(2)  # the client reads nothing: the service must wait, not the master's memory fill
        held = service.sent
        assert held < 32 * 1024 * 1024, held
        taken = 0
        while taken < 8 * 1024 * 1024:  # reading again lets the service go on
            taken += len(sock.recv(1 << 20))
    deadline = time.monotonic() + 10
    while service.sent <= held and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.sent > held


def test_a_client_that_leaves_ends_its_exchange_even_while_it_is_idle(
    cluster: Cluster, service: TaskService
) -> None:
    task_id = serving_notebook(cluster.master, service)
    sock = socket.create_connection(("127.0.0.1", cluster.port), timeout=10)
    sock.sendall(get_with_session(f"/proxy/{task_id}/idle"))
    received = b""
    while b"first line" not in received:
        received += sock.recv(4096)
    assert not service.departed.wait(0.5)  # an idle stream stays open while its client does
    sock.close()
    assert service.departed.wait(10)  # the service's side closed with the client's


def test_websockets_relay_messages_both_ways(cluster: Cluster, service: TaskService) -> None:
    task_id = serving_notebook(cluster.master, service)
    url = f"ws://127.0.0.1:{cluster.port}/proxy/{task_id}/api/kernels/k/channels?session=s"
    with ws_connect(
        url,
        additional_headers={
            "Cookie": "auth=admin-token; _xsrf=z",
            "Origin": f"http://127.0.0.1:{cluster.port}",
        },
        subprotocols=["v1.kernel.websocket.jupyter.org"],  # type: ignore[list-item]
        max_size=None,
        open_timeout=10,
    ) as ws:
        assert ws.subprotocol == "v1.kernel.websocket.jupyter.org"
        for message in ("ping", b"x" * 200_000):
            ws.send(message)
            assert ws.recv(timeout=10) == message
        sent = service.ws_headers
        assert sent["cookie"] == "_xsrf=z" and sent["authorization"].startswith("token ")
        assert (
            sent["host"] == f"127.0.0.1:{cluster.port}"
            and sent["origin"] == f"http://127.0.0.1:{cluster.port}"
        )
        ws.send("bye")  # the service closes: so does the proxy, with the service's code
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4000
    # A client that leaves closes the service's side.
    ws = ws_connect(url, additional_headers={"Authorization": "Bearer admin-token"}, open_timeout=10)
    ws.send("hello")
    assert ws.recv(timeout=10) == "hello"
    service.ws_departed.clear()
    ws.close()
    assert service.ws_departed.wait(10)


def test_a_service_that_does_not_answer_is_a_502(cluster: Cluster, service: TaskService) -> None:
    task_id = serving_notebook(cluster.master, service)
    service.close()  # its port answers nothing any more
    answer = request(cluster, "GET", f"/proxy/{task_id}/lab", {"Authorization": "Bearer admin-token"})
    assert answer.status == 502 and b"did not answer" in answer.read()
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(
            f"ws://127.0.0.1:{cluster.port}/proxy/{task_id}/api/kernels/k/channels",
            additional_headers={"Authorization": "Bearer admin-token"},
            open_timeout=10,
        )
    assert refused.value.response.status_code == 502


def test_the_proxy_refuses_a_task_that_has_ended(cluster: Cluster, service: TaskService) -> None:
    master = cluster.master
    task_id = serving_notebook(master, service)
    with master.ctx.unit_of_work() as w:
        tasks.kill(master.ctx, w, tasks.load(w, task_id))
    master.settle()
    (container,) = [c for _, c in master.hub.commands("kill")]
    master.exit(container.container_id, 143)
    ended = request(cluster, "GET", f"/proxy/{task_id}/lab", {"Authorization": "Bearer admin-token"})
    assert ended.status == 404 and b"has ended" in ended.read()


def test_healthz_and_metrics_answer_in_every_process(cluster: Cluster) -> None:
    base = f"http://127.0.0.1:{cluster.port}"
    assert requests.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
    metrics = requests.get(f"{base}/metrics", timeout=10)
    assert metrics.status_code == 200 and "cairn_agents " in metrics.text
    assert metrics.headers["Content-Type"] == "text/plain; version=0.0.4"


def test_the_gateway_service_opens_to_the_boots_key_alone(tmp_path: Path) -> None:
    master = Master(tmp_path / "master")
    try:
        targets = LocalTargets(master.ctx, lambda token: master.admin)
        with (
            gateway_service(master, targets, "the-key") as port,
            grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
        ):
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            ask = gateway_pb2.ResolveProxyRequest(task_id="nope", session_token="t")
            for metadata in ((), ((GATEWAY_KEY_KEY, "wrong"),), (("authorization", "Bearer t"),)):
                with pytest.raises(grpc.RpcError) as refused:
                    stub.ResolveProxy(ask, metadata=metadata, timeout=10)
                assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            answer = stub.ResolveProxy(ask, metadata=((GATEWAY_KEY_KEY, "the-key"),), timeout=10)
            assert answer.refused.refusal == gateway_pb2.REFUSAL_NOT_FOUND
            assert stub.Health(
                gateway_pb2.HealthRequest(), metadata=((GATEWAY_KEY_KEY, "the-key"),)
            ).database_ok
    finally:
        master.close()
