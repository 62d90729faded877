"""User groups (Determined's /api/v1/groups): the caller, the message, domain/identity/groups.py."""

from __future__ import annotations

import grpc

from cairn.api.v1 import rbac_pb2
from services.master.domain.identity import groups
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc


def group_details(info: groups.GroupInfo) -> rbac_pb2.GroupDetails:
    return rbac_pb2.GroupDetails(
        group_id=info.id, name=info.name, users=[convert.user(u) for u in info.members]
    )


class GroupsApi(ServicerBase):
    @rpc
    def CreateGroup(
        self, request: rbac_pb2.CreateGroupRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.CreateGroupResponse:
        info = groups.create(self.ctx, self.user(context), request.name, list(request.add_users))
        return rbac_pb2.CreateGroupResponse(group=group_details(info))

    @rpc
    def GetGroups(
        self, request: rbac_pb2.GetGroupsRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.GetGroupsResponse:
        self.user(context)
        query = groups.GroupQuery(
            name=request.name if request.HasField("name") else None,
            user_id=request.user_id if request.HasField("user_id") else None,
            offset=request.offset,
            limit=request.limit,
        )
        rows, page = groups.listing(self.ctx.db, query)
        return rbac_pb2.GetGroupsResponse(
            groups=[
                rbac_pb2.GroupSearchResult(
                    group=rbac_pb2.Group(group_id=r.id, name=r.name), num_members=r.num_members
                )
                for r in rows
            ],
            pagination=convert.pagination(page),
        )

    @rpc
    def GetGroup(
        self, request: rbac_pb2.GetGroupRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.GetGroupResponse:
        self.user(context)
        return rbac_pb2.GetGroupResponse(group=group_details(groups.get(self.ctx.db, request.group_id)))

    @rpc
    def UpdateGroup(
        self, request: rbac_pb2.UpdateGroupRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.UpdateGroupResponse:
        info = groups.update(
            self.ctx,
            self.user(context),
            request.group_id,
            request.name if request.HasField("name") else None,
            list(request.add_users),
            list(request.remove_users),
        )
        return rbac_pb2.UpdateGroupResponse(group=group_details(info))

    @rpc
    def DeleteGroup(
        self, request: rbac_pb2.DeleteGroupRequest, context: grpc.ServicerContext
    ) -> rbac_pb2.DeleteGroupResponse:
        groups.delete_group(self.ctx, self.user(context), request.group_id)
        return rbac_pb2.DeleteGroupResponse()
