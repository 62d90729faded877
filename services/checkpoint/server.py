"""Starting the checkpoint service's gRPC server (used by the entry point and by tests)."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from cairn.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from services.checkpoint.servicer import SERVICE_NAME, CheckpointServicer
from services.common.interceptors import AuthInterceptor, cluster_token_authenticator
from services.common.server import ServiceServer, start_server

DEFAULT_PORT = 8093


def serve(
    host: str = "127.0.0.1", port: int = DEFAULT_PORT, cluster_token: str | None = None
) -> ServiceServer:
    """Start serving; with a cluster token, every call (but health and reflection) must present it."""
    servicer = CheckpointServicer()

    def register(server: grpc.Server) -> Sequence[str]:
        pb_grpc.add_CheckpointServiceServicer_to_server(servicer, server)
        return [SERVICE_NAME]

    interceptors = [AuthInterceptor(cluster_token_authenticator(cluster_token))] if cluster_token else []
    return start_server("checkpoint", register, host=host, port=port, interceptors=interceptors)
