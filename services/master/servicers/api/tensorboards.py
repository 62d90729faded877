"""TensorBoards: Determined's routes, converted to and from the TensorBoard and task lifecycles."""

from __future__ import annotations

import grpc
from google.protobuf import json_format

from cairn.api.v1 import common_pb2
from cairn.api.v1 import tensorboard_pb2 as tpb
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads import tasks as reads
from services.master.domain.task_kinds import tensorboard_sources
from services.master.domain.tasks import notebooks, tensorboards
from services.master.domain.tasks import tasks as task_lifecycle
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.api.commands import (
    command_message,
    config_struct,
    context_files,
    whole_numbers,
)
from services.master.servicers.errors import rpc

# The fields a TensorBoard shares with a command (the same names and meaning).
_SHARED_FIELDS = (
    "id",
    "description",
    "state",
    "username",
    "resource_pool",
    "exit_status",
    "job_id",
    "display_name",
    "user_id",
    "workspace_id",
)


def tensorboard_message(row: reads.TaskRow) -> tpb.Tensorboard:
    command = command_message(row)
    experiment_ids, trial_ids = tensorboard_sources.shown_ids(row.task.config)
    message = tpb.Tensorboard(
        service_address=notebooks.proxy_path(row.task.id), experiment_ids=experiment_ids, trial_ids=trial_ids
    )
    message.start_time.CopyFrom(command.start_time)
    for name in _SHARED_FIELDS:
        setattr(message, name, getattr(command, name))
    return message


class TensorboardsApi(ServicerBase):
    @rpc
    def LaunchTensorboard(
        self, request: tpb.LaunchTensorboardRequest, context: grpc.ServicerContext
    ) -> tpb.LaunchTensorboardResponse:
        principal = self.user(context)
        config = (
            whole_numbers(json_format.MessageToDict(request.config)) if request.HasField("config") else {}
        )
        task_id = tensorboards.start(
            self.ctx,
            principal,
            list(request.experiment_ids),
            list(request.trial_ids),
            config,
            context_files(request.files),
            request.workspace_id or None,
        )
        with self.ctx.db.read() as s:
            row = reads.task_row(s, task_id, TaskKind.TENSORBOARD)
        return tpb.LaunchTensorboardResponse(
            tensorboard=tensorboard_message(row), config=config_struct(row.task.config)
        )

    @rpc
    def GetTensorboards(
        self, request: tpb.GetTensorboardsRequest, context: grpc.ServicerContext
    ) -> tpb.GetTensorboardsResponse:
        self.user(context)
        with self.ctx.db.read() as s:
            rows, page = reads.task_page(
                s,
                TaskKind.TENSORBOARD,
                usernames=tuple(request.users),
                user_ids=tuple(request.user_ids),
                workspace_id=request.workspace_id or None,
                newest_first=request.order_by == common_pb2.ORDER_BY_DESC,
                offset=request.offset,
                limit=request.limit,
            )
        return tpb.GetTensorboardsResponse(
            tensorboards=[tensorboard_message(row) for row in rows], pagination=convert.pagination(page)
        )

    @rpc
    def GetTensorboard(
        self, request: tpb.GetTensorboardRequest, context: grpc.ServicerContext
    ) -> tpb.GetTensorboardResponse:
        self.user(context)
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.tensorboard_id, TaskKind.TENSORBOARD)
        return tpb.GetTensorboardResponse(
            tensorboard=tensorboard_message(row), config=config_struct(row.task.config)
        )

    @rpc
    def KillTensorboard(
        self, request: tpb.KillTensorboardRequest, context: grpc.ServicerContext
    ) -> tpb.KillTensorboardResponse:
        task_lifecycle.kill_by_user(
            self.ctx, self.user(context), request.tensorboard_id, TaskKind.TENSORBOARD
        )
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.tensorboard_id, TaskKind.TENSORBOARD)
        return tpb.KillTensorboardResponse(tensorboard=tensorboard_message(row))

    @rpc
    def SetTensorboardPriority(
        self, request: tpb.SetTensorboardPriorityRequest, context: grpc.ServicerContext
    ) -> tpb.SetTensorboardPriorityResponse:
        task_lifecycle.set_priority(
            self.ctx, self.user(context), request.tensorboard_id, TaskKind.TENSORBOARD, request.priority
        )
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.tensorboard_id, TaskKind.TENSORBOARD)
        return tpb.SetTensorboardPriorityResponse(tensorboard=tensorboard_message(row))
