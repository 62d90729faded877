"""Notebooks with the stock determined==0.38.1 client: `det notebook start` waits until JupyterLab
answers, which it does only through the master's proxy at /proxy/{task_id}/ and only with a
session, and `det task list` shows its port; a cell runs over the kernel's websocket through the
same proxy; a master kill -9 leaves it reachable; `det notebook kill` ends it and the proxy then
refuses; an idle notebook stops itself after its idle_timeout. On the process and the Docker
runtime; SQLite only (nothing here depends on the database backend)."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests

from cairn.api.v1 import auth_pb2, notebook_pb2, task_pb2
from cairn.client.password import salt_and_hash
from tests.e2e.determined_client import det_runner, determined_env
from tests.support.cluster import TestCluster, running_cluster
from tests.support.docker_env import require_task_image
from tests.support.polling import wait_for
from tests.support.websocket import WebSocket


@pytest.fixture(params=["process", "docker"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestCluster]:
    """One agent with two slots, on each runtime (the Docker one where dockerd runs)."""
    image = require_task_image() if request.param == "docker" else None
    with running_cluster(
        tmp_path / "cluster", None, agents=1, slots=2, runtime=request.param, default_image=image
    ) as c:
        yield c


@pytest.fixture
def det(cluster: TestCluster, tmp_path: Path) -> Callable[..., str]:
    return det_runner(determined_env(cluster, tmp_path / "home"))


def session_token(cluster: TestCluster, username: str = "determined") -> str:
    response = cluster.raw_stub().Login(
        auth_pb2.LoginRequest(username=username, password=salt_and_hash(""), is_hashed=True), timeout=30
    )
    return str(response.token)


def allocation_address(cluster: TestCluster, task_id: str) -> str:
    """host:port the notebook listens on, as its allocation's row records it (the proxy's target)."""
    (database,) = list((cluster.state_dir / "master").glob("*.db"))
    with sqlite3.connect(database) as db:
        (address,) = db.execute(
            "SELECT proxy_address FROM allocations WHERE task_id = ? AND proxy_address IS NOT NULL",
            (task_id,),
        ).fetchone()
    return str(address)


def execute(ws: WebSocket, code: str) -> str:
    """Run `code` on the kernel (Jupyter's messaging protocol over its channels websocket): its
    execute_result's text."""
    msg_id = uuid.uuid4().hex
    ws.send_text(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "msg_type": "execute_request",
                    "username": "test",
                    "session": uuid.uuid4().hex,
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "content": {"code": code, "silent": False, "store_history": False},
                "channel": "shell",
                "buffers": [],
            }
        )
    )
    while True:
        message = json.loads(ws.receive_text())
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if message["header"]["msg_type"] == "execute_result":
            return str(message["content"]["data"]["text/plain"])
        if message["header"]["msg_type"] == "error":
            raise AssertionError(f"the cell failed: {message['content']}")


def test_a_notebook_answers_through_the_proxy_runs_a_cell_survives_a_master_restart_and_stops_when_killed(
    cluster: TestCluster, det: Callable[..., str]
) -> None:
    assert cluster.record is not None and cluster.record.master_http_url
    master = cluster.record.master_http_url.rstrip("/")
    out = det("notebook", "start", "--no-browser", "--config", "resources.slots=0")
    assert "Jupyter Notebook is running at" in out  # `det` waited until the allocation was ready
    (listed,) = json.loads(det("notebook", "list", "--json"))
    task_id = listed["id"]
    assert listed["state"] == "RUNNING" and listed["serviceAddress"] == f"/proxy/{task_id}/"
    assert f"/proxy/{task_id}/" in out  # the URL `det` prints is the master's proxy
    # `det task list` shows its port as Determined's ProxyPortConfig: its default service, named by
    # the task's id, HTTP behind a session.
    (summary,) = [t for t in json.loads(det("task", "list", "--json")).values() if t["taskId"] == task_id]
    port = int(allocation_address(cluster, task_id).rsplit(":", 1)[1])
    assert [
        (p["serviceId"], p["port"], bool(p["proxyTcp"]), bool(p["unauthenticated"]))
        for p in summary["proxyPorts"]
    ] == [(task_id, port, False, False)]
    assert str(port) in det("task", "list")

    base = f"{master}/proxy/{task_id}/"
    anonymous = requests.get(f"{base}api/status", timeout=30)
    assert anonymous.status_code == 401 and "authentication required" in anonymous.text
    http = requests.Session()
    http.headers["Authorization"] = f"Bearer {session_token(cluster)}"
    status = http.get(f"{base}api/status", timeout=30)
    assert status.status_code == 200 and "started" in status.json()
    lab = http.get(f"{base}lab", timeout=30)
    assert lab.status_code == 200 and "JupyterLab" in lab.text
    as_admin = {"Authorization": f"Bearer {session_token(cluster, 'admin')}"}
    admin = requests.get(f"{base}api/status", headers=as_admin, timeout=30)
    assert admin.status_code == 200  # an admin may open anyone's notebook

    # A kernel, made over REST and run over its websocket, both through the master.
    xsrf = http.cookies.get("_xsrf")
    assert xsrf, "Jupyter set its XSRF cookie through the proxy"
    kernel = http.post(
        f"{base}api/kernels", json={"name": "python3"}, headers={"X-XSRFToken": xsrf}, timeout=60
    )
    assert kernel.status_code == 201, kernel.text
    address = urlparse(master)
    ws = WebSocket.connect(
        address.hostname or "127.0.0.1",
        address.port or 80,
        f"/proxy/{task_id}/api/kernels/{kernel.json()['id']}/channels",
        {
            "Authorization": http.headers["Authorization"],
            "Cookie": f"_xsrf={xsrf}",
            "X-XSRFToken": xsrf,
        },
        timeout=60,
    )
    try:
        assert execute(ws, "6 * 7") == "42"
    finally:
        ws.close()

    # The notebook's own port on the agent answers only the proxy (which presents the allocation's
    # credential): another process on the machine that finds the port gets nothing from it.
    direct = f"http://{allocation_address(cluster, task_id)}/proxy/{task_id}/api/status"
    assert requests.get(direct, timeout=30).status_code == 403
    assert requests.get(direct, headers={"Authorization": "token guess"}, timeout=30).status_code == 403

    # The proxy's address is in the allocation's row: a master killed and restarted serves it again.
    cluster.kill("master")
    cluster.restart("master")
    http.headers["Authorization"] = f"Bearer {session_token(cluster)}"
    wait_for(
        lambda: http.get(f"{base}api/status", timeout=30).status_code == 200,
        timeout=60,
        what="the notebook through the restarted master",
    )

    assert "JupyterLab answers" in det("notebook", "logs", task_id)
    det("notebook", "kill", task_id)
    wait_for(
        lambda: http.get(f"{master}/api/v1/tasks/{task_id}", timeout=30).json()["task"].get("endTime"),
        timeout=60,
        what=f"notebook {task_id} to end",
    )
    ended = http.get(f"{base}api/status", timeout=30)
    assert ended.status_code == 404 and "has ended" in ended.text


def test_an_idle_notebook_is_stopped_after_its_idle_timeout(
    cluster: TestCluster, det: Callable[..., str]
) -> None:
    api = cluster.login()
    task_id = det(
        "notebook", "start", "-d", "--config", "resources.slots=0", "--config", "idle_timeout=5s"
    ).strip()
    # No kernel and no terminal runs (Determined's default notebook_idle_type): idle from the start.
    wait_for(
        lambda: api.GetNotebook(notebook_pb2.GetNotebookRequest(notebook_id=task_id)).notebook.exit_status,
        timeout=90,
        what=f"notebook {task_id} to stop when idle",
    )
    notebook = api.GetNotebook(notebook_pb2.GetNotebookRequest(notebook_id=task_id)).notebook
    assert (notebook.state, notebook.exit_status) == (task_pb2.Allocation.STATE_TERMINATED, "killed")
    task = api.GetTask(notebook_pb2.GetTaskRequest(task_id=task_id)).task
    assert task.HasField("end_time") and task.allocations[0].is_ready  # it ran, then timed out
