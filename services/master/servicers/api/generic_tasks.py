"""Generic tasks (Determined's `det task create|config|pause|unpause|kill`): their own routes,
whose shapes are not the interactive kinds' (a YAML config, a project, a fork, pause and unpause),
converted to and from the one task lifecycle."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import grpc

from cairn.api.v1 import command_pb2 as cpb
from services.master.domain.config import ConfigError
from services.master.domain.config.yaml_text import parse_config_text
from services.master.domain.identity import access
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads import tasks as reads
from services.master.domain.tasks import tasks as task_lifecycle
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.api.task_kinds import context_files
from services.master.servicers.errors import named_rpc, rpc


def _change(name: str, change: task_lifecycle.Change, response: Callable[[], Any]) -> Callable[..., Any]:
    def handler(self: ServicerBase, request: Any, context: grpc.ServicerContext) -> Any:
        principal = self.user(context)
        task_lifecycle.change_by_user(self.ctx, principal, request.task_id, TaskKind.GENERIC, change)
        return response()

    return named_rpc(name, handler)


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
        principal = self.user(context)
        with self.ctx.db.read() as s:
            task = reads.task(s, request.task_id, TaskKind.GENERIC)
            access.check_task_readable(s, principal, task)
        return cpb.GetGenericTaskConfigResponse(config=json.dumps(task.config or {}))

    # Kill, pause and unpause: the same change by the task's owner or an admin, with an empty answer.
    KillGenericTask = _change("KillGenericTask", task_lifecycle.kill, cpb.KillGenericTaskResponse)
    PauseGenericTask = _change("PauseGenericTask", task_lifecycle.pause, cpb.PauseGenericTaskResponse)
    UnpauseGenericTask = _change("UnpauseGenericTask", task_lifecycle.unpause, cpb.UnpauseGenericTaskResponse)
