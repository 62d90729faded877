"""Fixtures for the checkpoint tests: storage sections for each backend (S3 through moto's real HTTP
server on a free port) and the checkpoint service on a free port."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import grpc
import pytest
from moto.server import ThreadedMotoServer

from cairn.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from services.checkpoint.server import serve
from services.common.channels import internal_channel

S3_ACCESS_KEY = "cairn-test-access"
S3_SECRET_KEY = "cairn-test-secret"
BACKENDS = ("shared_fs", "directory", "s3")


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_section(s3_endpoint: str) -> dict[str, Any]:
    """A fresh bucket per test, so tests never see each other's objects."""
    bucket = f"cairn-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=bucket)
    return {
        "type": "s3",
        "bucket": bucket,
        "prefix": "experiments/ckpts",
        "endpoint_url": s3_endpoint,
        "access_key": S3_ACCESS_KEY,
        "secret_key": S3_SECRET_KEY,
        "save_trial_best": 1,
    }


def filesystem_section(backend: str, tmp_path: Path) -> dict[str, Any]:
    if backend == "shared_fs":
        host = tmp_path / "shared"
        host.mkdir()
        return {"type": "shared_fs", "host_path": str(host), "storage_path": "checkpoints"}
    directory = tmp_path / "mounted"
    directory.mkdir()
    return {"type": "directory", "container_path": str(directory)}


@pytest.fixture(params=BACKENDS)
def storage_section(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The `checkpoint_storage` section of each backend in turn."""
    backend: str = request.param
    if backend == "s3":
        section: dict[str, Any] = request.getfixturevalue("s3_section")
        return section
    return filesystem_section(backend, tmp_path)


@pytest.fixture
def checkpoint_address() -> Iterator[str]:
    server = serve(host="127.0.0.1", port=0)
    yield f"127.0.0.1:{server.port}"
    server.stop(grace=1.0)


@pytest.fixture
def checkpoint_stub(checkpoint_address: str) -> Iterator[pb_grpc.CheckpointServiceStub]:
    channel = internal_channel(checkpoint_address, cluster_token=None)
    grpc.channel_ready_future(channel).result(timeout=10)
    yield pb_grpc.CheckpointServiceStub(channel)
    channel.close()
