"""Master information (answered without credentials)."""

from __future__ import annotations

import grpc

from cairn import DETERMINED_API_VERSION
from cairn.api.v1 import master_pb2
from services.common.logging import get_logger
from services.master.configuration.oidc import sso_providers
from services.master.domain.kernel.errors import DatabaseUnavailable
from services.master.domain.operations import cluster_message
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.api.cluster_message import message_pb
from services.master.servicers.errors import rpc

log = get_logger(__name__)


class MasterApi(ServicerBase):
    @rpc
    def GetMaster(
        self, request: master_pb2.GetMasterRequest, context: grpc.ServicerContext
    ) -> master_pb2.GetMasterResponse:
        settings = self.ctx.settings
        try:
            showing = cluster_message.showing_message(self.ctx)
        except DatabaseUnavailable:
            # GetMaster is how clients learn the master is up: it answers through an outage of
            # the database, without the banner, rather than fail.
            log.warning("cluster message not read: the database is unavailable")
            showing = None
        return master_pb2.GetMasterResponse(
            version=DETERMINED_API_VERSION,
            cairn_version=self.deps.version,
            master_id=self.ctx.master_id,
            cluster_id=self.ctx.cluster_id,
            cluster_name=settings.cluster_name,
            telemetry_enabled=False,
            # Roles decide every call (domain/identity/access.py): Determined's clients then offer
            # `det rbac` and `det user-group`.
            rbac_enabled=True,
            product=master_pb2.GetMasterResponse.PRODUCT_COMMUNITY,
            user_management_enabled=True,
            strict_job_queue_control=False,
            has_custom_logo=False,
            feature_switches=settings.feature_switches,
            cluster_message=message_pb(showing) if showing is not None else None,
            grpc_port=settings.grpc_port,
            http_port=settings.http_port,
            database=self.deps.database,
            sso_providers=[master_pb2.SSOProvider(**p) for p in sso_providers(settings.oidc)],
        )
