"""Access tokens (issue 44) driven as their users drive them: the stock `det token ...`
(determined==0.38.1) creates, lists, describes, edits and revokes them, `det token login` and
`DET_USER_TOKEN` make the client use one; every step's end state is read back (`det` exits 0
after many failures). Then the revocation: on a master whose public port runs in two processes
(`CAIRN_HTTP_PROCESSES=2`), the very next call with the token is refused, whichever process takes
it: gRPC, REST, the task proxy and the websocket of streaming updates."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

import grpc
import pytest
import requests

from cairn.api.v1 import auth_pb2
from tests.e2e.determined_client import DET, det_runner, determined_env
from tests.e2e.test_e2e_rest import TIMEOUT, base_url, rest_login
from tests.support.cluster import TestCluster, running_cluster
from tests.support.websocket import WebSocket, WebSocketError

# Fresh connections: the kernel hands each to whichever process accepts first, so a few dozen
# reach both (the master's own and the worker).
ROUNDS = 30
CLOSE = {"Connection": "close"}


@pytest.fixture
def cluster(db_url: str | None, tmp_path: Path) -> Iterator[TestCluster]:
    config = tmp_path / "master.yaml"
    config.write_text("feature_switches: [streaming_updates]\n")
    env = {"CAIRN_HTTP_PROCESSES": "2", "CAIRN_MASTER_CONFIG": str(config)}
    with running_cluster(tmp_path / "cluster", db_url, agents=0, extra_env=env) as c:
        yield c


def _det(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DET), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _whoami(env: dict[str, str]) -> str:
    result = _det(env, "user", "whoami")
    return result.stdout + result.stderr


def test_the_stock_client_creates_uses_edits_and_revokes_a_token(
    cluster: TestCluster, tmp_path: Path
) -> None:
    det = det_runner(determined_env(cluster, tmp_path / "home"), "determined")
    admin = det_runner(determined_env(cluster, tmp_path / "admin-home"), "admin")
    my_id = rest_login(base_url(cluster)).json()["user"]["id"]

    created = json.loads(det("token", "create", "-d", "nightly sync", "-e", "2", "--json"))
    token, token_id = created["token"], created["tokenId"]
    (listed,) = json.loads(det("token", "list", "--json"))
    assert (listed["id"], listed["userId"], listed["description"], listed["revoked"]) == (
        token_id,
        my_id,
        "nightly sync",
        False,
    )
    assert listed["tokenType"] == "TOKEN_TYPE_ACCESS_TOKEN"
    expiry = datetime.fromisoformat(listed["expiry"].replace("Z", "+00:00"))
    assert timedelta(days=2) - timedelta(minutes=5) < expiry - datetime.now(UTC) <= timedelta(days=2)
    assert token not in det("token", "list", "--json")  # shown once, at creation

    det("token", "edit", str(token_id), "-d", "renamed")
    (described,) = json.loads(det("token", "describe", str(token_id), "--json"))
    assert described["description"] == "renamed"

    # An admin sees it; its owner sees no one else's and makes none for anyone else.
    assert token_id in [t["id"] for t in json.loads(admin("token", "list", "determined", "--json"))]
    admin_token = json.loads(admin("token", "create", "-d", "admin's", "--json"))["tokenId"]
    assert [t["id"] for t in json.loads(det("token", "list", "--json"))] == [token_id]
    refused = det("token", "create", "admin", check=False)
    assert "only its owner or an admin" in refused
    assert [t["id"] for t in json.loads(admin("token", "list", "admin", "--json"))] == [admin_token]
    assert "only its owner or an admin" in det("token", "revoke", str(admin_token), check=False)
    assert not json.loads(admin("token", "describe", str(admin_token), "--json"))[0]["revoked"]

    # The client uses the token: `det token login`, and DET_USER_TOKEN where no login is cached.
    logged_in = determined_env(cluster, tmp_path / "token-home")
    login = _det(logged_in, "token", "login", token)
    assert "Authenticated as determined" in login.stdout, login.stdout + login.stderr
    assert "You are logged in as user 'determined'" in _whoami(logged_in)
    from_env = {
        **determined_env(cluster, tmp_path / "env-home"),
        "DET_USER": "determined",
        "DET_USER_TOKEN": token,
    }
    assert "You are logged in as user 'determined'" in _whoami(from_env)

    det("token", "revoke", str(token_id))
    assert json.loads(det("token", "list", "--json")) == []
    (revoked,) = json.loads(det("token", "list", "--show-inactive", "--json"))
    assert (revoked["id"], revoked["revoked"]) == (token_id, True)
    assert "logged in as user" not in _whoami(logged_in)
    assert "logged in as user" not in _whoami(from_env)
    assert "logged in as user 'determined'" in det("user", "whoami")  # the login's session lives on


def _create(base: str, admin_token: str, user_id: int, lifespan: str | None = None) -> tuple[str, int]:
    body: dict[str, object] = {"userId": user_id, "description": "revocation check"}
    if lifespan is not None:
        body["lifespan"] = lifespan
    response = requests.post(
        f"{base}/api/v1/tokens",
        json=body,
        headers={**CLOSE, "Authorization": f"Bearer {admin_token}"},
        timeout=TIMEOUT,
    )
    assert response.status_code == 200, response.text
    created = response.json()
    return str(created["token"]), int(created["tokenId"])


def _rest_statuses(base: str, token: str) -> set[int]:
    """GET /api/v1/me and the task proxy, each over ROUNDS fresh connections (both processes)."""
    headers = {**CLOSE, "Authorization": f"Bearer {token}"}
    statuses = set()
    for _ in range(ROUNDS):
        statuses.add(requests.get(f"{base}/api/v1/me", headers=headers, timeout=TIMEOUT).status_code)
        # No such task: 404 for a caller the master knows, 401 for one it does not.
        statuses.add(
            requests.get(f"{base}/proxy/no-such-task/", headers=headers, timeout=TIMEOUT).status_code
        )
    return statuses


def _grpc_code(cluster: TestCluster, token: str) -> grpc.StatusCode:
    try:
        cluster.raw_stub().GetMe(
            auth_pb2.GetMeRequest(), metadata=[("authorization", f"Bearer {token}")], timeout=30
        )
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def _stream_handshakes(base: str, token: str) -> set[str]:
    """The websocket of streaming updates, opened ROUNDS // 3 times: "open" or the refusal's status line."""
    url = urlsplit(base)
    assert url.hostname is not None and url.port is not None
    answers = set()
    for _ in range(ROUNDS // 3):
        try:
            socket = WebSocket.connect(
                url.hostname, url.port, "/stream", {"Authorization": f"Bearer {token}"}
            )
        except WebSocketError as exc:
            answers.add(str(exc).split("\r\n", 1)[0].removeprefix("handshake refused: "))
        else:
            socket.close()
            answers.add("open")
    return answers


def test_a_revoked_or_expired_token_is_refused_at_once_in_every_process(cluster: TestCluster) -> None:
    base = base_url(cluster)
    admin_token = rest_login(base, username="admin").json()["token"]
    user_id = rest_login(base).json()["user"]["id"]
    token, token_id = _create(base, admin_token, user_id)
    # Checked in every process, and remembered.
    assert _rest_statuses(base, token) == {200, 404}
    assert _grpc_code(cluster, token) == grpc.StatusCode.OK
    assert _stream_handshakes(base, token) == {"open"}

    revoked = requests.patch(
        f"{base}/api/v1/tokens/{token_id}",
        json={"tokenId": token_id, "setRevoked": True},
        headers={**CLOSE, "Authorization": f"Bearer {admin_token}"},
        timeout=TIMEOUT,
    )
    revoked_at = time.monotonic()
    assert revoked.status_code == 200 and revoked.json()["tokenInfo"]["revoked"] is True

    # The next calls, at once: no process lets it through.
    assert _grpc_code(cluster, token) == grpc.StatusCode.UNAUTHENTICATED
    first_refusal_s = time.monotonic() - revoked_at
    assert _rest_statuses(base, token) == {401}
    assert _stream_handshakes(base, token) == {"HTTP/1.1 401 Unauthorized"}
    assert first_refusal_s < 1.0

    # An expired one likewise, from the moment it ends.
    short, _ = _create(base, admin_token, user_id, lifespan="3s")
    assert _grpc_code(cluster, short) == grpc.StatusCode.OK
    time.sleep(3.1)
    assert _grpc_code(cluster, short) == grpc.StatusCode.UNAUTHENTICATED
    assert _rest_statuses(base, short) == {401}
