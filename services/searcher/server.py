"""Starting the searcher's gRPC server: the plug-in kit's SearcherService edge over the built-in
methods, with health, reflection and, when the cluster has a shared token, the check that every
caller presents it."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from cairn.searcher.v1 import searcher_pb2_grpc
from cairn.searcher_plugin.servicer import SERVICE_NAME, SearcherServicer
from services.common.interceptors import AuthInterceptor, cluster_token_authenticator
from services.common.server import ServiceServer, start_server
from services.searcher.domain.factory import BuiltinSearches
from services.searcher.domain.registry import MethodRegistry, builtin_registry

DEFAULT_PORT = 8092


def serve(
    host: str, port: int, cluster_token: str | None, registry: MethodRegistry | None = None
) -> ServiceServer:
    servicer = SearcherServicer(BuiltinSearches(registry or builtin_registry()))

    def register(server: grpc.Server) -> Sequence[str]:
        searcher_pb2_grpc.add_SearcherServiceServicer_to_server(servicer, server)
        return [SERVICE_NAME]

    interceptors = [AuthInterceptor(cluster_token_authenticator(cluster_token))] if cluster_token else []
    return start_server("searcher", register, host=host, port=port, interceptors=interceptors)
