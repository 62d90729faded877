"""A local Cairn cluster for benchmarks, through the same supervisor as `cairn cluster up`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from cairn.api.v1 import api_pb2_grpc, auth_pb2, experiment_pb2
from cairn.client.model_definition import build_model_definition
from cairn.client.password import salt_and_hash
from cairn.localcluster.plan import ClusterOptions
from cairn.localcluster.supervisor import start_cluster, stop_cluster


class Api:
    http_url: str = ""

    def __init__(self, address: str, username: str = "determined") -> None:
        """Logged in as `username` (an empty password: "determined", or "admin" for what only an
        admin may do)."""
        self.channel = grpc.insecure_channel(address)
        stub = api_pb2_grpc.CairnStub(self.channel)
        token = stub.Login(
            auth_pb2.LoginRequest(username=username, password=salt_and_hash(""), is_hashed=True)
        )
        self.stub = stub
        self.metadata = [("authorization", f"Bearer {token.token}")]

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.stub, name)
        return lambda request, **kw: method(request, metadata=self.metadata, **kw)

    def create(self, config_text: str, model_dir: Path) -> int:
        request = experiment_pb2.CreateExperimentRequest(
            config=config_text, model_definition=build_model_definition(model_dir), activate=True
        )
        return int(self.CreateExperiment(request).experiment.id)

    def wait_terminal(self, experiment_id: int, timeout: float = 3600, interval: float = 0.05) -> str:
        """The experiment's end state, polled every `interval` s (short for latency benches; a
        throughput bench polls seldom, so that its own reads do not load the master)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            exp = self.GetExperiment(
                experiment_pb2.GetExperimentRequest(experiment_id=experiment_id)
            ).experiment
            state = experiment_pb2.Experiment.State.Name(exp.state).removeprefix("STATE_")
            if state in ("COMPLETED", "CANCELED", "ERROR"):
                return state
            time.sleep(interval)
        raise TimeoutError(f"experiment {experiment_id} did not finish in {timeout} s")


@contextmanager
def cairn_cluster(
    state_dir: Path,
    *,
    agents: int,
    slots: int,
    db_url: str | None = None,
    runtime: str = "process",
    log_level: str = "WARNING",
    **more: Any,
) -> Iterator[Api]:
    """`log_level`: the services' (WARNING: a bench measures the work, not its INFO lines; a
    cluster started by `cairn cluster up` logs at INFO). `more`: any other ClusterOptions field
    (provision, extra_env, default_image...)."""
    options = ClusterOptions(
        runtime=runtime,
        state_dir=state_dir,
        agents=agents,
        slots_per_agent=slots,
        db_url=db_url,
        master_port=0,
        http_port=0,
        log_level=log_level,
        **more,
    )
    record = start_cluster(options)
    assert record.master_grpc_address
    api = Api(record.master_grpc_address)
    api.http_url = record.master_http_url or ""
    try:
        yield api
    finally:
        api.channel.close()
        stop_cluster(state_dir)
