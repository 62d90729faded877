"""Scheduler tests: the pure decision function, its properties, and the real gRPC server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.common.server import ServiceServer
from services.scheduler.app import start_scheduler

CLUSTER_TOKEN = "scheduler-test-token"


@pytest.fixture
def scheduler_cluster_token() -> str:
    return CLUSTER_TOKEN


@pytest.fixture
def scheduler_server(scheduler_cluster_token: str) -> Iterator[ServiceServer]:
    """The real scheduler on a free port, requiring the cluster token."""
    server = start_scheduler(host="127.0.0.1", port=0, cluster_token=scheduler_cluster_token)
    try:
        yield server
    finally:
        server.stop(grace=0)


@pytest.fixture
def open_scheduler_server() -> Iterator[ServiceServer]:
    """The real scheduler on a free port with no cluster token configured."""
    server = start_scheduler(host="127.0.0.1", port=0, cluster_token=None)
    try:
        yield server
    finally:
        server.stop(grace=0)
