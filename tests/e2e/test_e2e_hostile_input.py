"""The worst inputs of issue 15 sent to a real master (SQLite) over REST and gRPC: an alias bomb,
a 100 MB body, a config nested 1,000 deep, 100,000 trials, a config that is not UTF-8. Each gets
a 400 / INVALID_ARGUMENT (413 for the body) naming what is wrong, nothing is stored, the master's
memory stays within a bound and /healthz answers throughout."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import pytest
import requests

from cairn.api.v1 import auth_pb2
from cairn.api.v1 import experiment_pb2 as epb
from cairn.client.password import salt_and_hash
from services.master.gateway.http_answers import MAX_REQUEST_BODY_BYTES
from tests.e2e.helpers import config
from tests.e2e.test_e2e_rest import TIMEOUT, base_url, model_definition, rest_login
from tests.support.cluster import TestCluster, running_cluster

# The 705-byte bomb took the master from 1.8 GB to over 4 GB; a refused request may cost a
# transient copy or two of a 100 MB body, no more.
RSS_GROWTH_BOUND_BYTES = 768 * 1024 * 1024
HEALTH_TIMEOUT_S = 5.0
BIG_BODY_BYTES = 100 * 1000 * 1000


def alias_bomb() -> str:
    lines = [
        config().rstrip("\n"),
        "data:",
        '  l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ]
    for level in range(1, 9):
        lines.append(f"  l{level}: &l{level} [{','.join([f'*l{level - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def deep(depth: int) -> str:
    return config() + "data: " + "{a: " * depth + "1" + "}" * depth + "\n"


def hundred_thousand_trials() -> str:
    return config(searcher={"name": "random", "max_trials": 100_000, "max_concurrent_trials": 0})


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TestCluster]:
    with running_cluster(tmp_path / "cluster", None, agents=1, slots=1) as c:
        yield c


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


@dataclass
class Watch:
    """Samples the master's RSS and asks /healthz every 0.2 s while the attack runs."""

    pid: int
    base: str
    peak_rss: int = 0
    health_failures: list[str] = field(default_factory=list)
    checks: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, rss_bytes(self.pid))
            try:
                answer = requests.get(f"{self.base}/healthz", timeout=HEALTH_TIMEOUT_S)
                if answer.status_code != 200:
                    self.health_failures.append(f"/healthz answered {answer.status_code}")
            except requests.RequestException as exc:
                self.health_failures.append(f"/healthz: {exc}")
            self.checks += 1
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()


def raw_http(base: str, head: str, body: bytes = b"") -> tuple[int, str]:
    """Send `head` (and `body`) on a fresh connection; (status, answer text) of what comes back."""
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as conn:
        conn.sendall(head.encode() + b"\r\n\r\n" + body)
        received = b""
        while b"\r\n\r\n" not in received or len(received) < received.index(b"\r\n\r\n") + 10:
            chunk = conn.recv(65536)
            if not chunk:
                break
            received += chunk
    status_line, _, rest = received.decode(errors="replace").partition("\r\n")
    return int(status_line.split()[1]), rest


def post_config(
    session: requests.Session, base: str, text: str, files: list[dict[str, Any]]
) -> requests.Response:
    body = {"config": text, "modelDefinition": files, "activate": True}
    return session.post(f"{base}/api/v1/experiments", json=body, timeout=TIMEOUT)


def error_text(response: requests.Response) -> str:
    return str(response.json()["error"]["error"])


def test_hostile_input_is_refused_stores_nothing_and_keeps_the_master_healthy(
    cluster: TestCluster, trial_dir: Path
) -> None:
    base = base_url(cluster)
    session = requests.Session()
    rest_login(base, session)
    files = model_definition(trial_dir)
    watch = Watch(cluster.process("master").pid, base)
    baseline = rss_bytes(watch.pid)
    sampler = threading.Thread(target=watch.run, daemon=True)
    sampler.start()
    try:
        # REST: the alias bomb, 1,000 levels, 100,000 trials.
        answer = post_config(session, base, alias_bomb(), files)
        assert answer.status_code == 400 and "data.l" in error_text(answer), answer.text
        assert "aliases expanded" in error_text(answer)
        answer = post_config(session, base, deep(1_000), files)
        assert answer.status_code == 400, answer.text
        assert error_text(answer).startswith("invalid experiment config: data.a.a.a")
        assert "nested deeper than 32 levels" in error_text(answer)
        answer = post_config(session, base, hundred_thousand_trials(), files)
        assert answer.status_code == 400, answer.text
        assert error_text(answer).startswith("searcher.max_trials: asks for 100000 trials")

        # A 100 MB body is refused from its Content-Length, before a byte of it is sent...
        started = time.monotonic()
        status, text = raw_http(
            base,
            f"POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {BIG_BODY_BYTES}",
        )
        assert status == 413 and "over this call's limit" in text
        assert time.monotonic() - started < 2
        # ... and a chunked one as soon as its data passes the limit (the HTTP parser does not
        # show the chunk sizes), never holding more than the limit.
        status, text = raw_http(
            base,
            "POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked",
            f"{BIG_BODY_BYTES:x}\r\n".encode() + b"x" * (MAX_REQUEST_BODY_BYTES + 1),
        )
        assert status == 413 and "over this call's limit" in text
        # The one call that may carry 100 MB (a model definition) reads it, then refuses the
        # oversized config by its size, not after parsing it.
        started = time.monotonic()
        answer = post_config(session, base, "data: " + "x" * BIG_BODY_BYTES, files)
        assert answer.status_code == 400, answer.text[:500]
        assert error_text(answer).startswith("invalid experiment config: config: 100000006 characters")
        assert time.monotonic() - started < 30

        # gRPC: a config that is not UTF-8, then the bomb and the depth over the same channel.
        login = cluster.raw_stub().Login(
            auth_pb2.LoginRequest(username="determined", password=salt_and_hash(""), is_hashed=True),
            timeout=30,
        )
        metadata = [("authorization", f"Bearer {login.token}")]
        with grpc.insecure_channel(cluster.address) as channel:
            raw = channel.unary_unary("/cairn.api.v1.Cairn/CreateExperiment")
            request = epb.CreateExperimentRequest(config="name: x\nentrypoint: y\n").SerializeToString()
            with pytest.raises(grpc.RpcError) as caught:
                raw(request.replace(b"name: x", b"name: \xff"), metadata=metadata, timeout=30)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert caught.value.details() == "config: not valid UTF-8 text"
            stub = cluster.login()
            for text, expected in ((alias_bomb(), "aliases expanded"), (deep(1_000), "nested deeper")):
                with pytest.raises(grpc.RpcError) as caught:
                    stub.CreateExperiment(epb.CreateExperimentRequest(config=text))
                assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert expected in (caught.value.details() or "")
    finally:
        watch.stop()
        sampler.join(timeout=10)

    admin = requests.Session()
    rest_login(base, admin, username="admin")
    listed = admin.get(f"{base}/api/v1/experiments", timeout=TIMEOUT).json()
    assert listed["experiments"] == [], "a refused request stored an experiment"
    assert watch.health_failures == [] and watch.checks > 0
    growth = watch.peak_rss - baseline
    assert growth < RSS_GROWTH_BOUND_BYTES, f"the master grew by {growth // 2**20} MiB"
