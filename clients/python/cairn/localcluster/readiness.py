"""Is a service up? Its ready file says it has bound its ports; the gRPC health check says it serves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc

SERVING = "SERVING"
UNREACHABLE = "UNREACHABLE"


def read_ready_file(path: Path) -> dict[str, Any] | None:
    """The ready file's content, or None while it is absent. Services write it atomically, so a
    file that does not parse is treated as not there yet rather than as an error."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def health_status(address: str, timeout_s: float = 1.0, ca_file: str | None = None) -> str:
    """The overall status from grpc.health.v1.Health/Check: "SERVING", "NOT_SERVING", ... or
    "UNREACHABLE" when the call fails. With `ca_file` over TLS, verified against it (a master of
    `cluster up --tls`; the other services speak plaintext on loopback)."""
    # Imported here: the health stubs come with the services' dependencies, and a client-only
    # install of `cairn` must still be able to load the CLI.
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    if ca_file:
        credentials = grpc.ssl_channel_credentials(root_certificates=Path(ca_file).read_bytes())
        channel = grpc.secure_channel(address, credentials)
    else:
        channel = grpc.insecure_channel(address)
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))
    except grpc.RpcError:
        return UNREACHABLE
    finally:
        channel.close()
