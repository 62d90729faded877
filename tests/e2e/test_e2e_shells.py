"""Shells with the stock determined==0.38.1 client: `det shell start` makes a shell whose SSH server
lets in only the key the master made for it; `det shell open ID -- CMD` runs CMD in the task (its
working directory, its environment) over `ssh` with Determined's ProxyCommand, a TCP tunnel over a
websocket through the master's /proxy/{id}/, never an agent's port; another user gets no key and
is refused by the proxy; `det shell kill` ends it and the proxy then refuses everyone. Cairn's own
`cairn shell` opens it the same way. On the process runtime (SQLite; nothing here depends on the
database backend) and, where dockerd runs with the task image, the Docker runtime."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests

from cairn.api.v1 import auth_pb2
from cairn.client.password import salt_and_hash
from tests.e2e.determined_client import DET, det_runner, determined_env
from tests.e2e.helpers import cairn_cli
from tests.support.cluster import TestCluster, running_cluster
from tests.support.docker_env import require_task_image
from tests.support.polling import wait_for
from tests.support.websocket import WebSocket, WebSocketError


@pytest.fixture(params=["process", "docker"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestCluster]:
    image = require_task_image() if request.param == "docker" else None
    with running_cluster(
        tmp_path / "cluster", None, agents=1, slots=1, runtime=request.param, default_image=image
    ) as c:
        yield c


def session_token(cluster: TestCluster, username: str, password: str = "") -> str:
    response = cluster.raw_stub().Login(
        auth_pb2.LoginRequest(username=username, password=salt_and_hash(password), is_hashed=True), timeout=30
    )
    return str(response.token)


def det_as(env: dict[str, str], user: str, password: str) -> Callable[..., str]:
    """`det ARGS...` as `user`, logged in with `password`: stdout and stderr together."""

    def run(*args: str, stdin: str = "") -> str:
        done = subprocess.run(
            [str(DET), "-u", user, *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return done.stdout + done.stderr

    run("user", "login", user, stdin=password + "\n")
    return run


def tunnel_refusal(master: str, shell_id: str, headers: dict[str, str]) -> str:
    """The proxy's answer to a websocket for the shell's port; "" when it accepted one."""
    address = urlparse(master)
    try:
        ws = WebSocket.connect(
            address.hostname or "127.0.0.1", address.port or 80, f"/proxy/{shell_id}/", headers
        )
    except WebSocketError as exc:
        return str(exc)
    ws.close()
    return ""


def test_a_shell_runs_commands_over_ssh_through_the_master_for_its_owner_only_until_killed(
    cluster: TestCluster, tmp_path: Path
) -> None:
    assert cluster.record is not None and cluster.record.master_http_url
    master = cluster.record.master_http_url.rstrip("/")
    det = det_runner(determined_env(cluster, tmp_path / "home"))
    admin = det_runner(determined_env(cluster, tmp_path / "admin-home"), user="admin")
    admin("user", "create", "bob", "--password", "Bob-pass12")

    context = tmp_path / "context"
    context.mkdir()
    (context / "marker.txt").write_text("from the context\n")
    started = det("shell", "start", "--detach", "--config", "resources.slots=0", "--context", str(context))
    shell_id = started.split()[-1]  # after the upload's progress lines
    (listed,) = json.loads(det("shell", "list", "--json"))
    assert listed["id"] == shell_id and listed["username"] == "determined"

    # `det shell open` waits until the SSH server is ready, then runs ssh through the master.
    out = det(
        "shell", "open", shell_id, "--", "echo", "ok;", "cat", "marker.txt;", "echo", "task=$DET_TASK_ID"
    )
    assert "ok" in out.split(), out
    assert "from the context" in out and f"task={shell_id}" in out, out
    # No command: an interactive shell on the terminal ssh -tt asks for, fed from stdin.
    assert "interactive-42" in det("shell", "open", shell_id, stdin="echo interactive-$((6*7))\nexit\n")
    (listed,) = json.loads(det("shell", "list", "--json"))
    assert listed["state"] == "RUNNING", listed  # det renders STATE_RUNNING so
    # `det task list` shows its SSH server's port as Determined's ProxyPortConfig: a TCP stream,
    # reached without a session (the key is the credential), named by the task's id.
    (summary,) = [t for t in json.loads(det("task", "list", "--json")).values() if t["taskId"] == shell_id]
    ((service, port, tcp, unauthenticated),) = [
        (p["serviceId"], p["port"], p["proxyTcp"], p["unauthenticated"]) for p in summary["proxyPorts"]
    ]
    assert (service, tcp, unauthenticated) == (shell_id, True, True) and port > 0
    assert str(port) in det("task", "list")
    assert not listed.get("privateKey")  # a listing is no place for the key
    assert "determined.cli.tunnel" in det("shell", "show-ssh-command", shell_id)
    det("shell", "set", "priority", shell_id, "10")
    assert "priority: 10" in det("shell", "config", shell_id)

    owner = {"Authorization": f"Bearer {session_token(cluster, 'determined')}"}
    bob = {"Authorization": f"Bearer {session_token(cluster, 'bob', 'Bob-pass12')}"}
    mine = requests.get(f"{master}/api/v1/shells/{shell_id}", headers=owner, timeout=30).json()["shell"]
    assert mine["privateKey"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert mine["publicKey"].startswith("ssh-ed25519 ")
    theirs = requests.get(f"{master}/api/v1/shells/{shell_id}", headers=bob, timeout=30).json()["shell"]
    assert theirs["privateKey"] == ""  # only its owner or an admin gets the key
    assert "403" in tunnel_refusal(master, shell_id, bob)
    assert tunnel_refusal(master, shell_id, {}) == ""  # Determined's tunnel sends no session
    # bob's `det shell open`: no key, so ssh has nothing the shell's server lets in.
    bob_det = det_as(determined_env(cluster, tmp_path / "bob-home"), "bob", "Bob-pass12")
    assert "ok" not in bob_det("shell", "open", shell_id, "--", "echo", "ok").split()

    # Cairn's own CLI opens the same shell through the same proxy.
    cairn = cairn_cli(cluster, tmp_path / "cairn-home")
    assert shell_id in cairn("shell", "list")
    assert "hello" in cairn("shell", "open", shell_id, "--", "echo", "hello").split()

    det("shell", "kill", shell_id)
    wait_for(
        lambda: (
            requests.get(f"{master}/api/v1/tasks/{shell_id}", headers=owner, timeout=30)
            .json()["task"]
            .get("endTime")
        ),
        timeout=60,
        what=f"shell {shell_id} to end",
    )
    assert "404" in tunnel_refusal(master, shell_id, {})
    ended = requests.get(f"{master}/proxy/{shell_id}/", timeout=30)
    assert ended.status_code == 404 and "has ended" in ended.text, ended.text
