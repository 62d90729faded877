"""The master's own config and log (`det master config`, `det master logs`)."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from cairn.api.v1 import master_pb2, trial_pb2
from services.master.domain.operations import master_config
from services.master.domain.operations.master_log import read_master_logs
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc, stream_rpc


class MasterInfoApi(ServicerBase):
    @rpc
    def GetMasterConfig(
        self, request: master_pb2.GetMasterConfigRequest, context: grpc.ServicerContext
    ) -> master_pb2.GetMasterConfigResponse:
        master_config.check_can_read(self.user(context))
        return master_pb2.GetMasterConfigResponse(
            config=convert.struct(master_config.effective_config(self.ctx))
        )

    @stream_rpc
    def MasterLogs(
        self, request: master_pb2.MasterLogsRequest, context: grpc.ServicerContext
    ) -> Iterator[master_pb2.MasterLogsResponse]:
        self.user(context)  # any logged-in user, as in Determined (its CanGetMasterLogs)
        records = read_master_logs(
            self.deps.master_log,
            offset=request.offset,
            limit=request.limit,
            follow=request.follow,
            is_active=context.is_active,
        )
        for record in records:
            yield master_pb2.MasterLogsResponse(
                log_entry=master_pb2.LogEntry(
                    id=record.id,
                    message=record.message,
                    timestamp=convert.ts(record.timestamp),
                    level=trial_pb2.LogLevel.Value(f"LOG_LEVEL_{record.level}"),
                )
            )
