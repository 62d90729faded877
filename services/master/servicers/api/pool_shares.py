"""Fair share's weights and quotas per pool (`cairn workspace quota|set-quota|clear-quota`)."""

from __future__ import annotations

import grpc

from cairn.api.v1 import workspace_pb2 as wpb
from services.master.domain.workspaces import pool_shares
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc


class PoolSharesApi(ServicerBase):
    @rpc
    def GetWorkspacePoolShares(
        self, request: wpb.GetWorkspacePoolSharesRequest, context: grpc.ServicerContext
    ) -> wpb.GetWorkspacePoolSharesResponse:
        self.user(context)
        return wpb.GetWorkspacePoolSharesResponse(
            shares=[
                wpb.PoolShare(
                    resource_pool=share.pool,
                    user_id=share.user_id,
                    username=share.username,
                    weight=share.weight,
                    guaranteed_slots=share.guaranteed_slots,
                    max_slots=share.max_slots,
                    slots_in_use=share.slots_in_use,
                )
                for share in pool_shares.shares_of(self.ctx, request.workspace_id)
            ]
        )

    @rpc
    def SetWorkspacePoolShare(
        self, request: wpb.SetWorkspacePoolShareRequest, context: grpc.ServicerContext
    ) -> wpb.SetWorkspacePoolShareResponse:
        pool_shares.set_share(
            self.ctx,
            self.user(context),
            request.workspace_id,
            request.resource_pool,
            user_id=request.user_id,
            weight=request.weight or 1.0,
            guaranteed_slots=request.guaranteed_slots,
            max_slots=request.max_slots,
        )
        return wpb.SetWorkspacePoolShareResponse()

    @rpc
    def DeleteWorkspacePoolShare(
        self, request: wpb.DeleteWorkspacePoolShareRequest, context: grpc.ServicerContext
    ) -> wpb.DeleteWorkspacePoolShareResponse:
        pool_shares.clear_share(
            self.ctx, self.user(context), request.workspace_id, request.resource_pool, request.user_id
        )
        return wpb.DeleteWorkspacePoolShareResponse()
