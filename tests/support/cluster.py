"""A real local cluster for end-to-end tests, started and stopped by the same supervisor as
`cairn cluster up|down`, with every service a separate process on real sockets."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from cairn.api.v1 import api_pb2_grpc, auth_pb2
from cairn.client.password import salt_and_hash
from cairn.localcluster.plan import ClusterOptions, Provisioning
from cairn.localcluster.processes import is_running, spawn
from cairn.localcluster.record import ClusterRecord, load_record, save_record
from cairn.localcluster.supervisor import start_cluster, stop_cluster
from tests.support.polling import wait_for

REPO = Path(__file__).resolve().parents[2]

# Short timeouts keep fault tests quick; production defaults are minutes.
TEST_ENV = {
    "CAIRN_PREEMPTION_TIMEOUT": "20",
    "CAIRN_AGENT_RECONNECT_WAIT": "10",
    "CAIRN_LOG_LEVEL": "INFO",
}


class AuthedStub:
    """The Cairn stub with a user's token on every call."""

    def __init__(self, channel: grpc.Channel, token: str) -> None:
        self._stub = api_pb2_grpc.CairnStub(channel)
        self._metadata = [("authorization", f"Bearer {token}")]

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        def call(request: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("metadata", self._metadata)
            kwargs.setdefault("timeout", 30)
            return method(request, **kwargs)

        return call


@dataclass
class TestCluster:
    state_dir: Path
    db_url: str | None
    agents: int = 1
    slots: int = 1
    extra_env: dict[str, str] = field(default_factory=dict)
    # The watchdog restarts crashed services; fault tests that restart by hand keep it off.
    supervise: bool = False
    # Standby masters' gRPC addresses, given to the agents after the master's (a failover test
    # starts the standby itself).
    standby_masters: tuple[str, ...] = ()
    # "docker": the agents run trials in containers of default_image (tests/support/docker_env.py).
    runtime: str = "process"
    default_image: str | None = None
    # `cluster up --tls`: the master serves TLS with a self-signed certificate (record.master_ca_file).
    tls: bool = False
    # The Python environment trials run in; None: the local cluster's default (.venv-task).
    task_env: Path | None = None
    # `cluster up --provision`: the master starts and retires the agents (then `agents` is 0).
    provision: Provisioning | None = None
    # The master's HTTP port; 0: any free one (a test that must name it beforehand, as single
    # sign-on's callback URL, picks one).
    http_port: int = 0
    record: ClusterRecord | None = None
    _channel: grpc.Channel | None = None

    __test__ = False  # not a pytest test class

    def start(self) -> TestCluster:
        options = ClusterOptions(
            state_dir=self.state_dir,
            agents=self.agents,
            slots_per_agent=self.slots,
            db_url=self.db_url,
            master_port=0,
            http_port=self.http_port,
            timeout_s=90,
            python=sys.executable,
            extra_env={**TEST_ENV, **self.extra_env},
            supervise=self.supervise,
            standby_master_addresses=self.standby_masters,
            runtime=self.runtime,
            default_image=self.default_image,
            tls=self.tls,
            provision=self.provision,
            **({"task_env": self.task_env} if self.task_env is not None else {}),
        )
        self.record = start_cluster(options)
        return self

    @property
    def address(self) -> str:
        assert self.record is not None and self.record.master_grpc_address
        return self.record.master_grpc_address

    @property
    def channel(self) -> grpc.Channel:
        if self._channel is None:
            if self.record is not None and self.record.master_ca_file:
                ca = Path(self.record.master_ca_file).read_bytes()
                credentials = grpc.ssl_channel_credentials(root_certificates=ca)
                self._channel = grpc.secure_channel(self.address, credentials)
            else:
                self._channel = grpc.insecure_channel(self.address)
        return self._channel

    def raw_stub(self) -> api_pb2_grpc.CairnStub:
        return api_pb2_grpc.CairnStub(self.channel)

    def login(self, username: str = "determined", password: str = "") -> AuthedStub:
        response = self.raw_stub().Login(
            auth_pb2.LoginRequest(username=username, password=salt_and_hash(password), is_hashed=True),
            timeout=30,
        )
        return AuthedStub(self.channel, response.token)

    def process(self, name: str) -> Any:
        record = load_record(self.state_dir / "cluster.json")
        assert record is not None
        return next(p for p in record.processes if p.name == name)

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        entry = self.process(name)
        os.kill(entry.pid, sig)
        wait_for(lambda: not is_running(entry.pid), timeout=20, what=f"{name} to exit")

    def restart(self, name: str) -> None:
        """Start a stopped process again with its recorded command (same ports for the master)."""
        record = load_record(self.state_dir / "cluster.json")
        assert record is not None
        entry = next(p for p in record.processes if p.name == name)
        command = list(entry.command)
        # The others know it by its address: it must come back on the same ports.
        if entry.grpc_port:
            command[command.index("--port") + 1] = str(entry.grpc_port)
        if entry.role == "master" and entry.http_port:
            command[command.index("--http-port") + 1] = str(entry.http_port)
        Path(entry.ready_file).unlink(missing_ok=True)
        env = {**os.environ, **TEST_ENV, **self.extra_env, "CAIRN_CLUSTER_TOKEN": record.cluster_token}
        process = spawn(command, Path(entry.log_path), env)
        entry.pid = process.pid
        entry.command = command
        save_record(self.state_dir / "cluster.json", record)
        try:
            wait_for(lambda: Path(entry.ready_file).exists(), timeout=60, what=f"{name} to be ready again")
        except AssertionError as exc:
            # What it printed says why (a port still held, a lock, a slow start); CI keeps only this.
            tail = Path(entry.log_path).read_text(errors="replace")[-4000:]
            exited = process.poll()
            raise AssertionError(f"{exc}; exit status {exited}; the end of its log:\n{tail}") from None

    def log(self, name: str) -> str:
        return (self.state_dir / "logs" / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None  # a later start() may bring the master back on another port
        record = load_record(self.state_dir / "cluster.json")
        pids = [p.pid for p in record.processes] if record else []
        stop_cluster(self.state_dir, grace_s=15)
        leftovers = [pid for pid in pids if is_running(pid)]
        assert not leftovers, f"processes left behind by cluster down: {leftovers}"
        assert not _processes_mentioning(str(self.state_dir)), "trial processes left behind"


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@contextmanager
def running_cluster(
    state_dir: Path,
    db_url: str | None,
    *,
    agents: int = 1,
    slots: int = 1,
    extra_env: dict[str, str] | None = None,
    supervise: bool = False,
    runtime: str = "process",
    default_image: str | None = None,
    tls: bool = False,
    task_env: Path | None = None,
    provision: Provisioning | None = None,
    http_port: int = 0,
) -> Iterator[TestCluster]:
    cluster = TestCluster(
        state_dir,
        db_url,
        agents=agents,
        slots=slots,
        extra_env=extra_env or {},
        supervise=supervise,
        runtime=runtime,
        default_image=default_image,
        tls=tls,
        task_env=task_env,
        provision=provision,
        http_port=http_port,
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
