"""Notebooks, and the task routes the stock client waits on (GetTask, AllocationReady): Determined's
routes, converted to and from the notebook and task lifecycles."""

from __future__ import annotations

import grpc
from google.protobuf import json_format

from cairn.api.v1 import common_pb2, task_pb2
from cairn.api.v1 import notebook_pb2 as npb
from services.master.domain.allocations import task_services
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads import tasks as reads
from services.master.domain.tasks import notebook_idle, notebooks
from services.master.domain.tasks import tasks as task_lifecycle
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.api.commands import (
    ALLOCATION_STATES,
    command_message,
    config_struct,
    context_files,
    whole_numbers,
)
from services.master.servicers.errors import rpc
from services.master.store import models

# The fields a notebook shares with a command (the same names and meaning).
_SHARED_FIELDS = (
    "id",
    "description",
    "state",
    "start_time",
    "username",
    "resource_pool",
    "exit_status",
    "job_id",
    "display_name",
    "user_id",
    "workspace_id",
)


def notebook_message(row: reads.TaskRow) -> npb.Notebook:
    command = command_message(row)
    message = npb.Notebook(service_address=notebooks.proxy_path(row.task.id))
    for name in _SHARED_FIELDS:
        if name == "start_time":
            message.start_time.CopyFrom(command.start_time)
        else:
            setattr(message, name, getattr(command, name))
    return message


def _allocation_message(alloc: models.Allocation) -> task_pb2.Allocation:
    message = task_pb2.Allocation(
        task_id=alloc.task_id,
        allocation_id=alloc.id,
        state=ALLOCATION_STATES[A(alloc.state)],
        is_ready=bool(alloc.is_ready),
        slots=alloc.slots,
        start_time=convert.ts(alloc.start_time),
        end_time=convert.ts(alloc.end_time),
    )
    if alloc.exit_reason:
        message.exit_reason = alloc.exit_reason
    if alloc.exit_code is not None:
        message.status_code = alloc.exit_code
    return message


class NotebooksApi(ServicerBase):
    @rpc
    def LaunchNotebook(
        self, request: npb.LaunchNotebookRequest, context: grpc.ServicerContext
    ) -> npb.LaunchNotebookResponse:
        principal = self.user(context)
        config = (
            whole_numbers(json_format.MessageToDict(request.config)) if request.HasField("config") else {}
        )
        if request.preview:
            return npb.LaunchNotebookResponse(config=config_struct(notebooks.notebook_config(config)))
        task_id = notebooks.start(
            self.ctx, principal, config, context_files(request.files), request.workspace_id or None
        )
        with self.ctx.db.read() as s:
            row = reads.task_row(s, task_id, TaskKind.NOTEBOOK)
        return npb.LaunchNotebookResponse(
            notebook=notebook_message(row), config=config_struct(row.task.config)
        )

    @rpc
    def GetNotebooks(
        self, request: npb.GetNotebooksRequest, context: grpc.ServicerContext
    ) -> npb.GetNotebooksResponse:
        self.user(context)
        with self.ctx.db.read() as s:
            rows, page = reads.task_page(
                s,
                TaskKind.NOTEBOOK,
                usernames=tuple(request.users),
                user_ids=tuple(request.user_ids),
                workspace_id=request.workspace_id or None,
                newest_first=request.order_by == common_pb2.ORDER_BY_DESC,
                offset=request.offset,
                limit=request.limit,
            )
        return npb.GetNotebooksResponse(
            notebooks=[notebook_message(row) for row in rows], pagination=convert.pagination(page)
        )

    @rpc
    def GetNotebook(
        self, request: npb.GetNotebookRequest, context: grpc.ServicerContext
    ) -> npb.GetNotebookResponse:
        self.user(context)
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.notebook_id, TaskKind.NOTEBOOK)
        return npb.GetNotebookResponse(notebook=notebook_message(row), config=config_struct(row.task.config))

    @rpc
    def KillNotebook(
        self, request: npb.KillNotebookRequest, context: grpc.ServicerContext
    ) -> npb.KillNotebookResponse:
        task_lifecycle.kill_by_user(self.ctx, self.user(context), request.notebook_id, TaskKind.NOTEBOOK)
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.notebook_id, TaskKind.NOTEBOOK)
        return npb.KillNotebookResponse(notebook=notebook_message(row))

    @rpc
    def SetNotebookPriority(
        self, request: npb.SetNotebookPriorityRequest, context: grpc.ServicerContext
    ) -> npb.SetNotebookPriorityResponse:
        task_lifecycle.set_priority(
            self.ctx, self.user(context), request.notebook_id, TaskKind.NOTEBOOK, request.priority
        )
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.notebook_id, TaskKind.NOTEBOOK)
        return npb.SetNotebookPriorityResponse(notebook=notebook_message(row))

    @rpc
    def IdleNotebook(
        self, request: npb.IdleNotebookRequest, context: grpc.ServicerContext
    ) -> npb.IdleNotebookResponse:
        notebook_idle.report_idle(self.ctx, self.caller(context), request.notebook_id, request.idle)
        return npb.IdleNotebookResponse()

    @rpc
    def GetTask(self, request: npb.GetTaskRequest, context: grpc.ServicerContext) -> npb.GetTaskResponse:
        self.user(context)
        with self.ctx.db.read() as s:
            task = reads.task(s, request.task_id)
            allocations = reads.allocations_of_task(s, task.id)
            message = npb.Task(
                task_id=task.id,
                task_type=npb.TaskType.Value(f"TASK_TYPE_{task.kind}"),
                start_time=convert.ts(task.start_time),
                end_time=convert.ts(task.end_time),
                allocations=[_allocation_message(a) for a in allocations],
            )
        return npb.GetTaskResponse(task=message)

    @rpc
    def AllocationReady(
        self, request: npb.AllocationReadyRequest, context: grpc.ServicerContext
    ) -> npb.AllocationReadyResponse:
        task_services.report_ready(self.ctx, self.caller(context), request.allocation_id)
        return npb.AllocationReadyResponse()
