"""Resource pools bound to workspaces (`det rp bindings add|remove|replace|list-workspaces`, a
workspace's available pools)."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from cairn.api.v1 import resourcepool_pb2 as rpb
from services.common.principal import Principal
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.context import MasterContext
from services.master.domain.workspaces import pool_bindings
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc

_Binding = (
    rpb.BindRPToWorkspaceRequest | rpb.OverwriteRPWorkspaceBindingsRequest | rpb.UnbindRPFromWorkspaceRequest
)

Change = Callable[[MasterContext, Principal, str, list[int], list[str]], None]


class PoolBindingsApi(ServicerBase):
    def _change(self, change: Change, request: _Binding, context: grpc.ServicerContext) -> None:
        """Bind, replace or unbind: the request's pool and workspaces, by the caller."""
        change(
            self.ctx,
            self.user(context),
            request.resource_pool_name,
            list(request.workspace_ids),
            list(request.workspace_names),
        )

    @rpc
    def BindRPToWorkspace(
        self, request: rpb.BindRPToWorkspaceRequest, context: grpc.ServicerContext
    ) -> rpb.BindRPToWorkspaceResponse:
        self._change(pool_bindings.bind, request, context)
        return rpb.BindRPToWorkspaceResponse()

    @rpc
    def OverwriteRPWorkspaceBindings(
        self, request: rpb.OverwriteRPWorkspaceBindingsRequest, context: grpc.ServicerContext
    ) -> rpb.OverwriteRPWorkspaceBindingsResponse:
        self._change(pool_bindings.replace, request, context)
        return rpb.OverwriteRPWorkspaceBindingsResponse()

    @rpc
    def UnbindRPFromWorkspace(
        self, request: rpb.UnbindRPFromWorkspaceRequest, context: grpc.ServicerContext
    ) -> rpb.UnbindRPFromWorkspaceResponse:
        self._change(pool_bindings.unbind, request, context)
        return rpb.UnbindRPFromWorkspaceResponse()

    @rpc
    def ListWorkspacesBoundToRP(
        self, request: rpb.ListWorkspacesBoundToRPRequest, context: grpc.ServicerContext
    ) -> rpb.ListWorkspacesBoundToRPResponse:
        ids, page = pool_bindings.workspaces_bound_to(
            self.ctx, request.resource_pool_name, request.offset, request.limit
        )
        return rpb.ListWorkspacesBoundToRPResponse(workspace_ids=ids, pagination=convert.pagination(page))

    @rpc
    def ListRPsBoundToWorkspace(
        self, request: rpb.ListRPsBoundToWorkspaceRequest, context: grpc.ServicerContext
    ) -> rpb.ListRPsBoundToWorkspaceResponse:
        workspace_id = request.workspace_id
        self.check_readable(
            context, Permission.VIEW_WORKSPACE, f"workspace {workspace_id}", lambda s: workspace_id
        )
        names, page = pool_bindings.pools_available_to(
            self.ctx, request.workspace_id, request.offset, request.limit
        )
        return rpb.ListRPsBoundToWorkspaceResponse(resource_pools=names, pagination=convert.pagination(page))
