"""Starting the scheduler's gRPC server: its servicer plus the cluster-token check."""

from __future__ import annotations

import grpc

from cairn.scheduler.v1 import scheduler_pb2, scheduler_pb2_grpc
from services.common.interceptors import AuthInterceptor, cluster_token_authenticator
from services.common.server import ServiceServer, start_server
from services.scheduler.servicer import SchedulerServicer

SERVICE_NAME = scheduler_pb2.DESCRIPTOR.services_by_name["SchedulerService"].full_name
DEFAULT_PORT = 8091


def start_scheduler(*, host: str, port: int, cluster_token: str | None) -> ServiceServer:
    """Serve SchedulerService on `host:port` (0 picks a free port). With a cluster token, every
    call but health and reflection must present it: only the master may ask for decisions."""
    interceptors: list[grpc.ServerInterceptor] = []
    if cluster_token:
        interceptors.append(AuthInterceptor(cluster_token_authenticator(cluster_token)))

    def register(server: grpc.Server) -> list[str]:
        scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server(SchedulerServicer(), server)
        return [SERVICE_NAME]

    # Each call is a short CPU-bound decision and one master calls at a time: few threads suffice.
    return start_server("scheduler", register, host=host, port=port, interceptors=interceptors, max_workers=8)
