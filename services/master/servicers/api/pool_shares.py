"""Weights and quotas per pool (`cairn workspace quota|set-quota|clear-quota`), and how each
fair-share pool is divided (`cairn resource-pool shares`, the WebUI)."""

from __future__ import annotations

import grpc

from cairn.api.v1 import resourcepool_pb2 as rpb
from cairn.api.v1 import workspace_pb2 as wpb
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.errors import NotFound
from services.master.domain.kernel.fair_shares import GroupDivision
from services.master.domain.workspaces import pool_shares
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc


def _fair_share(g: GroupDivision) -> rpb.FairShare:
    return rpb.FairShare(
        key=g.key,
        name=g.name,
        nominal_slots=g.nominal,
        entitled_slots=g.entitled,
        held_slots=g.held,
        wanted_slots=g.wanted,
        borrowed_slots=g.borrowed,
        lent_slots=g.lent,
    )


class PoolSharesApi(ServicerBase):
    @rpc
    def GetResourcePoolShares(
        self, request: rpb.GetResourcePoolSharesRequest, context: grpc.ServicerContext
    ) -> rpb.GetResourcePoolSharesResponse:
        self.user(context)
        pool = next((p for p in self.ctx.settings.pools if p.name == request.resource_pool_name), None)
        if pool is None:
            raise NotFound(f"resource pool {request.resource_pool_name!r} not found")
        answer = rpb.GetResourcePoolSharesResponse(fair_share=pool.scheduler_type == "fair_share")
        division = self.ctx.fair_shares.of(pool.name) if answer.fair_share else None
        if division is not None:
            answer.workspaces.extend(_fair_share(g) for g in division.workspaces)
            answer.users.extend(_fair_share(g) for g in division.users)
            answer.divided_at.FromDatetime(division.at)
        return answer

    @rpc
    def GetWorkspacePoolShares(
        self, request: wpb.GetWorkspacePoolSharesRequest, context: grpc.ServicerContext
    ) -> wpb.GetWorkspacePoolSharesResponse:
        self.user(context)
        workspace_id = request.workspace_id
        self.check_readable(
            context, Permission.VIEW_WORKSPACE, f"workspace {workspace_id}", lambda s: workspace_id
        )
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
                    fair_share=share.fair_share,
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
