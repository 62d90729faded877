"""Experiments' proxy ports with the stock determined==0.38.1 client, on a cluster of one agent
with one slot: a trial whose config lists `environment.proxy_ports` serves them through the
master at `/proxy/{task id}:{port}/`, as Determined does. An HTTP port answers a logged-in client
and refuses one without a session; an `unauthenticated` port answers anyone; a zero-slot trial
(`resources.slots_per_trial: 0`) serves beside the one holding the slot; `det experiment create
-f -p LOCAL:PORT` (the stock CLI's tunnel, a TCP port over the master's websocket proxy) and
`python -m determined.cli.tunnel --listener LOCAL --auth` carry bytes both ways, and that tunnel
without a session carries none; once the experiment is killed the ports are gone. On the process
runtime and, where dockerd runs with the task image, the Docker runtime (host networking: the
trial listens on the port on its agent's machine, as a Determined container in host mode does)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests
import yaml

from tests.e2e.determined_client import DET, det_runner, determined_env
from tests.e2e.test_e2e_shells import session_token
from tests.support.cluster import TestCluster, running_cluster
from tests.support.docker_env import require_task_image
from tests.support.polling import wait_for
from tests.support.ports import free_port
from tests.support.websocket import WebSocket, WebSocketError

# The trial: an HTTP server on each HTTP port (it answers with its port, the path it was asked
# for and the Authorization it was sent: the caller's session never reaches trial code) and a TCP
# echo server on the TCP port, bound on every address of its machine, until it is killed.
SERVE = """
import http.server, socket, socketserver, sys, threading, time

class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        seen = self.headers.get("Authorization")
        body = f"trial port {self.server.server_address[1]} path {self.path} auth {seen}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(4096):
            self.request.sendall(data.upper())

class Threaded(socketserver.ThreadingMixIn, socketserver.TCPServer):
    allow_reuse_address = True
    daemon_threads = True

http_ports, tcp_ports = sys.argv[1].split(","), sys.argv[2].split(",")
servers = [Threaded(("0.0.0.0", int(p)), Answer) for p in http_ports if p]
servers += [Threaded(("0.0.0.0", int(p)), Echo) for p in tcp_ports if p]
for server in servers:
    threading.Thread(target=server.serve_forever, daemon=True).start()
print("Server listening", flush=True)
while True:
    time.sleep(1)
"""


@pytest.fixture(params=["process", "docker"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestCluster]:
    image = require_task_image() if request.param == "docker" else None
    with running_cluster(
        tmp_path / "cluster", None, agents=1, slots=1, runtime=request.param, default_image=image
    ) as c:
        yield c


def experiment_config(
    path: Path, name: str, slots: int, ports: list[dict[str, object]], http: list[int], tcp: list[int]
) -> Path:
    http_arg, tcp_arg = ",".join(map(str, http)), ",".join(map(str, tcp))
    config = {
        "name": name,
        "entrypoint": f"python3 serve.py {http_arg} '{tcp_arg}'",
        "searcher": {"name": "single", "metric": "x", "max_length": {"batches": 1}},
        "resources": {"slots_per_trial": slots},
        "environment": {"proxy_ports": ports},
        "max_restarts": 0,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def task_id_of(master: str, headers: dict[str, str], experiment_id: int) -> str:
    def found() -> str | None:
        answer = requests.get(
            f"{master}/api/v1/experiments/{experiment_id}/trials", headers=headers, timeout=30
        )
        trials = answer.json().get("trials") or []
        return str(trials[0]["taskId"]) if trials and trials[0].get("taskId") else None

    return str(wait_for(found, timeout=120, what=f"experiment {experiment_id}'s trial"))


def get_when_up(url: str, headers: dict[str, str]) -> requests.Response:
    """The answer of the trial's port once its chief runs and its server listens (503 and 502
    until then)."""

    def answered() -> requests.Response | None:
        answer = requests.get(url, headers=headers, timeout=30)
        return answer if answer.status_code not in (502, 503) else None

    return wait_for(answered, timeout=180, what=f"{url} to answer")  # type: ignore[no-any-return]


def ws_refusal(master: str, path: str, headers: dict[str, str]) -> str:
    """The proxy's refusal of a websocket to `path`; "" when it accepted it."""
    address = urlparse(master)
    try:
        ws = WebSocket.connect(address.hostname or "127.0.0.1", address.port or 80, path, headers)
    except WebSocketError as exc:
        return str(exc)
    ws.close()
    return ""


def echo_through(local_port: int, payload: bytes) -> bytes:
    """What comes back through the local end of a tunnel for `payload` (b"" when it is not up)."""
    try:
        with socket.create_connection(("127.0.0.1", local_port), timeout=10) as conn:
            conn.sendall(payload)
            received = b""
            while len(received) < len(payload):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                received += chunk
            return received
    except OSError:
        return b""


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


def test_trial_ports_are_served_through_the_master_as_determined_serves_them(
    cluster: TestCluster, tmp_path: Path
) -> None:
    assert cluster.record is not None and cluster.record.master_http_url
    master = cluster.record.master_http_url.rstrip("/")
    env = determined_env(cluster, tmp_path / "home")
    det = det_runner(env)
    logged_in = {"Authorization": f"Bearer {session_token(cluster, 'determined')}"}
    context = tmp_path / "context"
    context.mkdir()
    (context / "serve.py").write_text(SERVE)

    # Ports on the agent's machine: free ones, as other clusters may share it.
    http_port, tcp_port, open_port, zero_slot_port, local_port = (free_port() for _ in range(5))
    one_slot = experiment_config(
        tmp_path / "one-slot.yaml",
        "proxied",
        1,
        [
            {"proxy_port": http_port},
            {"proxy_port": tcp_port, "proxy_tcp": True},
            {"proxy_port": open_port, "unauthenticated": True},
        ],
        [http_port, open_port],
        [tcp_port],
    )
    zero_slot = experiment_config(
        tmp_path / "zero-slot.yaml",
        "proxied-zero-slot",
        0,
        [{"proxy_port": zero_slot_port}],
        [zero_slot_port],
        [],
    )

    # A bad config is refused naming the field, before anything is stored.
    bad = experiment_config(
        tmp_path / "bad.yaml", "bad", 1, [{"proxy_port": 8000}, {"proxy_port": 8000}], [8000], []
    )
    refused = det("experiment", "create", str(bad), str(context), check=False)
    assert "environment.proxy_ports[1].proxy_port" in refused and "already listed" in refused, refused
    assert "Created experiment" not in refused

    # The stock CLI's tunnel: `det e create -f -p LOCAL:PORT` follows the first trial and
    # publishes its TCP port on a local one, through the master's websocket proxy.
    follow = subprocess.Popen(
        [str(DET), "-u", "determined", "experiment", "create", str(one_slot), str(context), "-f",
         "-p", f"{local_port}:{tcp_port}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        experiment_id = 1  # the refused config stored nothing
        task_id = task_id_of(master, logged_in, experiment_id)
        created = det("experiment", "create", str(zero_slot), str(context))
        zero_id = int(created.split("Created experiment")[1].split()[0])
        zero_task_id = task_id_of(master, logged_in, zero_id)

        # `det task list` shows each trial's ports.
        listed = det("task", "list", "--csv")
        assert ",".join(map(str, sorted([http_port, tcp_port, open_port]))) in listed, listed
        assert str(zero_slot_port) in listed, listed

        # HTTP, logged in: the trial answers, under the whole proxy path.
        answer = get_when_up(f"{master}/proxy/{task_id}:{http_port}/hello?x=1", logged_in)
        assert answer.status_code == 200, answer.text
        assert answer.text == f"trial port {http_port} path /proxy/{task_id}:{http_port}/hello?x=1 auth None"
        # Without a session: refused, and the trial is never asked.
        anonymous = requests.get(f"{master}/proxy/{task_id}:{http_port}/hello", timeout=30)
        assert anonymous.status_code == 401, anonymous.text
        assert "401" in ws_refusal(master, f"/proxy/{task_id}:{tcp_port}/", {})
        # An unauthenticated port answers anyone; a port the config does not list, nobody.
        assert requests.get(f"{master}/proxy/{task_id}:{open_port}/", timeout=30).status_code == 200
        unlisted = requests.get(f"{master}/proxy/{task_id}:{free_port()}/", headers=logged_in, timeout=30)
        assert unlisted.status_code == 404, unlisted.text

        # The zero-slot trial runs beside the one holding the only slot, and serves its port.
        zero = get_when_up(f"{master}/proxy/{zero_task_id}:{zero_slot_port}/", logged_in)
        zero_path = f"/proxy/{zero_task_id}:{zero_slot_port}/"
        assert zero.text == f"trial port {zero_slot_port} path {zero_path} auth None"

        # The TCP port through `det e create -p`: bytes both ways, twice over one connection.
        echoed = wait_for(lambda: echo_through(local_port, b"hola") or None, timeout=120, what="the tunnel")
        assert echoed == b"HOLA"
        with socket.create_connection(("127.0.0.1", local_port), timeout=10) as conn:
            for word in (b"first", b"second" * 1000):
                conn.sendall(word)
                received = b""
                while len(received) < len(word):
                    chunk = conn.recv(65536)
                    assert chunk, "the tunnel closed"
                    received += chunk
                assert received == word.upper()

        # Determined's tunnel script (what its docs give for a TCP port), with the cached session
        # (--auth) and without: the port needs one, so the second carries nothing.
        for auth, wanted in ((["--auth"], b"VIA SCRIPT"), ([], b"")):
            script_port = free_port()
            tunnel = subprocess.Popen(
                [str(DET.parent / "python"), "-m", "determined.cli.tunnel", "--listener", str(script_port),
                 *auth, master, f"{task_id}:{tcp_port}"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                wait_for(lambda p=script_port: _listening(p), timeout=60, what="the tunnel script to listen")  # type: ignore[misc]
                assert echo_through(script_port, b"via script") == wanted
            finally:
                tunnel.terminate()
                tunnel.wait(30)

        det("experiment", "kill", str(experiment_id))
        det("experiment", "kill", str(zero_id))
        for ended_task, port in ((task_id, http_port), (zero_task_id, zero_slot_port)):
            wait_for(
                lambda t=ended_task, p=port: (  # type: ignore[misc]
                    requests.get(f"{master}/proxy/{t}:{p}/", headers=logged_in, timeout=30).status_code == 404
                ),
                timeout=120,
                what=f"{ended_task}:{port} to be gone",
            )
        gone = requests.get(f"{master}/proxy/{task_id}:{http_port}/", headers=logged_in, timeout=30)
        assert "ended" in gone.text, gone.text
    finally:
        follow.terminate()
        try:
            follow.wait(30)
        except subprocess.TimeoutExpired:
            follow.kill()
            follow.wait(10)
