"""Searcher tests: domain (sampling, grid, methods, snapshots, sessions) and the real gRPC server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.common.server import ServiceServer
from services.searcher.server import serve

CLUSTER_TOKEN = "searcher-test-token"


@pytest.fixture
def searcher_server() -> Iterator[ServiceServer]:
    """The real searcher on a free port, with no cluster token configured."""
    server = serve("127.0.0.1", 0, None)
    try:
        yield server
    finally:
        server.stop(grace=0)


@pytest.fixture
def guarded_searcher_server() -> Iterator[ServiceServer]:
    """The real searcher on a free port, requiring the cluster token."""
    server = serve("127.0.0.1", 0, CLUSTER_TOKEN)
    try:
        yield server
    finally:
        server.stop(grace=0)
