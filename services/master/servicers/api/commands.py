"""Commands and generic tasks: Determined's routes, converted to and from the task lifecycle."""

from __future__ import annotations

import json
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from cairn.api.v1 import command_pb2 as cpb
from cairn.api.v1 import common_pb2, task_pb2
from services.master.domain.config import ConfigError
from services.master.domain.config.yaml_text import parse_config_text
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.kernel.states import TaskKind, TaskState
from services.master.domain.reads import tasks as reads
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.tasks import tasks as task_lifecycle
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc

State = task_pb2.Allocation.State
# An allocation's state as Determined's task states name it (a pending one is QUEUED).
ALLOCATION_STATES = {
    A.PENDING: State.STATE_QUEUED,
    A.ASSIGNED: State.STATE_STARTING,
    A.PULLING: State.STATE_PULLING,
    A.STARTING: State.STATE_STARTING,
    A.RUNNING: State.STATE_RUNNING,
    A.TERMINATING: State.STATE_TERMINATING,
    A.TERMINATED: State.STATE_TERMINATED,
}


def whole_numbers(value: Any) -> Any:
    """A Struct holds every number as a double: 0.0 slots is 0 slots, as the user wrote it."""
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def context_files(files: Any) -> list[ContextFile]:
    return [
        ContextFile(path=f.path, type=f.type, content=f.content, mtime=f.mtime, mode=f.mode) for f in files
    ]


def _exit_status(row: reads.TaskRow) -> str:
    task = row.task
    if task.state == TaskState.CANCELED:
        return "killed"
    if task.state not in (TaskState.COMPLETED, TaskState.ERROR):
        return ""
    if task.exit_code is not None:
        return f"exited with code {task.exit_code}"
    return task.exit_reason or task.state.lower()


def command_message(row: reads.TaskRow) -> cpb.Command:
    task = row.task
    state = ALLOCATION_STATES[A(row.allocation.state)] if row.allocation is not None else State.STATE_QUEUED
    if task.state in (TaskState.COMPLETED, TaskState.ERROR, TaskState.CANCELED):
        state = State.STATE_TERMINATED
    message = cpb.Command(
        id=task.id,
        description=task.description,
        state=state,
        start_time=convert.ts(task.start_time),
        username=row.username,
        display_name=row.username,
        user_id=task.owner_id,
        resource_pool=task.resource_pool,
        exit_status=_exit_status(row),
        job_id=task.job_id,
        workspace_id=task.workspace_id or 0,
    )
    if task.exit_code is not None:
        message.exit_code = task.exit_code
    return message


def config_struct(value: dict[str, Any] | None) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value or {})
    return struct


class CommandsApi(ServicerBase):
    @rpc
    def LaunchCommand(
        self, request: cpb.LaunchCommandRequest, context: grpc.ServicerContext
    ) -> cpb.LaunchCommandResponse:
        principal = self.user(context)
        config = (
            whole_numbers(json_format.MessageToDict(request.config)) if request.HasField("config") else {}
        )
        task_id = task_lifecycle.create(
            self.ctx,
            principal,
            task_lifecycle.TaskRequest(
                kind=TaskKind.COMMAND,
                config=config,
                files=context_files(request.files),
                workspace_id=request.workspace_id or None,
            ),
        )
        with self.ctx.db.read() as s:
            row = reads.task_row(s, task_id, TaskKind.COMMAND)
        return cpb.LaunchCommandResponse(command=command_message(row), config=config_struct(row.task.config))

    @rpc
    def GetCommands(
        self, request: cpb.GetCommandsRequest, context: grpc.ServicerContext
    ) -> cpb.GetCommandsResponse:
        self.user(context)
        with self.ctx.db.read() as s:
            rows, page = reads.task_page(
                s,
                TaskKind.COMMAND,
                usernames=tuple(request.users),
                user_ids=tuple(request.user_ids),
                workspace_id=request.workspace_id or None,
                newest_first=request.order_by == common_pb2.ORDER_BY_DESC,
                offset=request.offset,
                limit=request.limit,
            )
        return cpb.GetCommandsResponse(
            commands=[command_message(row) for row in rows], pagination=convert.pagination(page)
        )

    @rpc
    def GetCommand(
        self, request: cpb.GetCommandRequest, context: grpc.ServicerContext
    ) -> cpb.GetCommandResponse:
        self.user(context)
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.command_id, TaskKind.COMMAND)
        return cpb.GetCommandResponse(command=command_message(row), config=config_struct(row.task.config))

    @rpc
    def KillCommand(
        self, request: cpb.KillCommandRequest, context: grpc.ServicerContext
    ) -> cpb.KillCommandResponse:
        task_lifecycle.kill_by_user(self.ctx, self.user(context), request.command_id, TaskKind.COMMAND)
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.command_id, TaskKind.COMMAND)
        return cpb.KillCommandResponse(command=command_message(row))

    @rpc
    def SetCommandPriority(
        self, request: cpb.SetCommandPriorityRequest, context: grpc.ServicerContext
    ) -> cpb.SetCommandPriorityResponse:
        task_lifecycle.set_priority(
            self.ctx, self.user(context), request.command_id, TaskKind.COMMAND, request.priority
        )
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.command_id, TaskKind.COMMAND)
        return cpb.SetCommandPriorityResponse(command=command_message(row))


class GenericTasksApi(ServicerBase):
    @rpc
    def CreateGenericTask(
        self, request: cpb.CreateGenericTaskRequest, context: grpc.ServicerContext
    ) -> cpb.CreateGenericTaskResponse:
        principal = self.user(context)
        try:
            config: dict[str, Any] = parse_config_text(request.config) if request.config.strip() else {}
        except ConfigError as exc:
            raise InvalidArgument(f"config: {exc}") from None
        if not config and not request.forked_from:
            raise InvalidArgument("config: required (the task's configuration as YAML text)")
        task_id = task_lifecycle.create(
            self.ctx,
            principal,
            task_lifecycle.TaskRequest(
                kind=TaskKind.GENERIC,
                config=config,
                files=context_files(request.context_directory),
                project_id=request.project_id if request.HasField("project_id") else None,
                parent_id=request.parent_id or None,
                forked_from=request.forked_from or None,
                inherit_context=request.inherit_context,
                no_pause=request.no_pause,
            ),
        )
        return cpb.CreateGenericTaskResponse(task_id=task_id)

    @rpc
    def GetGenericTaskConfig(
        self, request: cpb.GetGenericTaskConfigRequest, context: grpc.ServicerContext
    ) -> cpb.GetGenericTaskConfigResponse:
        self.user(context)
        with self.ctx.db.read() as s:
            task = reads.task(s, request.task_id, TaskKind.GENERIC)
        return cpb.GetGenericTaskConfigResponse(config=json.dumps(task.config or {}))

    def _change(self, context: grpc.ServicerContext, task_id: str, change: Any) -> None:
        principal = self.user(context)
        with self.ctx.unit_of_work() as w:
            task = task_lifecycle.load(w, task_id, TaskKind.GENERIC)
            task_lifecycle.check_can_modify(principal, task)
            change(self.ctx, w, task)

    @rpc
    def KillGenericTask(
        self, request: cpb.KillGenericTaskRequest, context: grpc.ServicerContext
    ) -> cpb.KillGenericTaskResponse:
        self._change(context, request.task_id, task_lifecycle.kill)
        return cpb.KillGenericTaskResponse()

    @rpc
    def PauseGenericTask(
        self, request: cpb.PauseGenericTaskRequest, context: grpc.ServicerContext
    ) -> cpb.PauseGenericTaskResponse:
        self._change(context, request.task_id, task_lifecycle.pause)
        return cpb.PauseGenericTaskResponse()

    @rpc
    def UnpauseGenericTask(
        self, request: cpb.UnpauseGenericTaskRequest, context: grpc.ServicerContext
    ) -> cpb.UnpauseGenericTaskResponse:
        self._change(context, request.task_id, task_lifecycle.unpause)
        return cpb.UnpauseGenericTaskResponse()
