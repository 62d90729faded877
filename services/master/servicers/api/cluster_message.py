"""The cluster-wide message (`det master cluster-message set|clear|get`, the WebUI's banner)."""

from __future__ import annotations

from datetime import UTC

import grpc

from cairn.api.v1 import master_pb2
from services.master.domain.operations import cluster_message
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc


def message_pb(view: cluster_message.ClusterMessage) -> master_pb2.ClusterMessage:
    return master_pb2.ClusterMessage(
        message=view.message,
        start_time=convert.ts(view.start_time),
        end_time=convert.ts(view.end_time),
        created_time=convert.ts(view.created_time),
    )


class ClusterMessageApi(ServicerBase):
    @rpc
    def GetClusterMessage(
        self, request: master_pb2.GetClusterMessageRequest, context: grpc.ServicerContext
    ) -> master_pb2.GetClusterMessageResponse:
        current = cluster_message.current_message(self.ctx, self.user(context))
        if current is None:
            return master_pb2.GetClusterMessageResponse()
        return master_pb2.GetClusterMessageResponse(cluster_message=message_pb(current))

    @rpc
    def SetClusterMessage(
        self, request: master_pb2.SetClusterMessageRequest, context: grpc.ServicerContext
    ) -> master_pb2.SetClusterMessageResponse:
        cluster_message.set_message(
            self.ctx,
            self.user(context),
            request.message,
            start_time=request.start_time.ToDatetime(UTC) if request.HasField("start_time") else None,
            end_time=request.end_time.ToDatetime(UTC) if request.HasField("end_time") else None,
            duration=request.duration if request.HasField("duration") else None,
        )
        return master_pb2.SetClusterMessageResponse()

    @rpc
    def DeleteClusterMessage(
        self, request: master_pb2.DeleteClusterMessageRequest, context: grpc.ServicerContext
    ) -> master_pb2.DeleteClusterMessageResponse:
        cluster_message.clear_message(self.ctx, self.user(context))
        return master_pb2.DeleteClusterMessageResponse()
