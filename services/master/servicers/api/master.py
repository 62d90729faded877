"""Master information (answered without credentials)."""

from __future__ import annotations

import grpc

from cairn import DETERMINED_API_VERSION
from cairn.api.v1 import master_pb2
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc


class MasterApi(ServicerBase):
    @rpc
    def GetMaster(
        self, request: master_pb2.GetMasterRequest, context: grpc.ServicerContext
    ) -> master_pb2.GetMasterResponse:
        settings = self.ctx.settings
        return master_pb2.GetMasterResponse(
            version=DETERMINED_API_VERSION,
            cairn_version=self.deps.version,
            master_id=self.ctx.master_id,
            cluster_id=self.ctx.cluster_id,
            cluster_name=settings.cluster_name,
            telemetry_enabled=False,
            rbac_enabled=False,
            product=master_pb2.GetMasterResponse.PRODUCT_COMMUNITY,
            user_management_enabled=True,
            strict_job_queue_control=False,
            has_custom_logo=False,
            grpc_port=settings.grpc_port,
            http_port=settings.http_port,
            database=self.deps.database,
        )
