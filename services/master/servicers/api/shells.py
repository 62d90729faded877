"""Shells: Determined's routes (`det shell start|open|list|kill|set priority`), converted to and
from the shell lifecycle. The private key goes only to the shell's owner or an admin, and only in
the answers `det shell start` and `det shell open` read it from (LaunchShell, GetShell), never in
a listing."""

from __future__ import annotations

import grpc
from google.protobuf import json_format, struct_pb2
from sqlalchemy.orm import Session

from cairn.api.v1 import common_pb2
from cairn.api.v1 import shell_pb2 as spb
from services.common.principal import Principal
from services.master.domain.kernel.states import TaskKind
from services.master.domain.reads import tasks as reads
from services.master.domain.task_kinds import shell_keys
from services.master.domain.tasks import shells
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

# The fields a shell shares with a command (the same names and meaning).
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


def shell_message(
    s: Session, principal: Principal, row: reads.TaskRow, *, with_private_key: bool = False
) -> spb.Shell:
    command = command_message(row)
    keys = shell_keys.keys_for(s, principal, row.task)
    private_key = keys.private_key if with_private_key else ""
    # `det shell open` logs in as agentUserGroup.user; Cairn's SSH server runs the session as the
    # task's own user whatever name it is given, so the shell's owner names it.
    user_group = struct_pb2.Struct()
    user_group.update({"user": row.username})
    message = spb.Shell(private_key=private_key, public_key=keys.public_key, agent_user_group=user_group)
    message.start_time.CopyFrom(command.start_time)
    for name in _SHARED_FIELDS:
        setattr(message, name, getattr(command, name))
    return message


class ShellsApi(ServicerBase):
    @rpc
    def LaunchShell(
        self, request: spb.LaunchShellRequest, context: grpc.ServicerContext
    ) -> spb.LaunchShellResponse:
        principal = self.user(context)
        config = (
            whole_numbers(json_format.MessageToDict(request.config)) if request.HasField("config") else {}
        )
        task_id = shells.start(
            self.ctx, principal, config, context_files(request.files), request.workspace_id or None
        )
        with self.ctx.db.read() as s:
            row = reads.task_row(s, task_id, TaskKind.SHELL)
            return spb.LaunchShellResponse(
                shell=shell_message(s, principal, row, with_private_key=True),
                config=config_struct(row.task.config),
            )

    @rpc
    def GetShells(
        self, request: spb.GetShellsRequest, context: grpc.ServicerContext
    ) -> spb.GetShellsResponse:
        principal = self.user(context)
        with self.ctx.db.read() as s:
            rows, page = reads.task_page(
                s,
                TaskKind.SHELL,
                usernames=tuple(request.users),
                user_ids=tuple(request.user_ids),
                workspace_id=request.workspace_id or None,
                newest_first=request.order_by == common_pb2.ORDER_BY_DESC,
                offset=request.offset,
                limit=request.limit,
            )
            return spb.GetShellsResponse(
                shells=[shell_message(s, principal, row) for row in rows],
                pagination=convert.pagination(page),
            )

    @rpc
    def GetShell(self, request: spb.GetShellRequest, context: grpc.ServicerContext) -> spb.GetShellResponse:
        principal = self.user(context)
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.shell_id, TaskKind.SHELL)
            return spb.GetShellResponse(
                shell=shell_message(s, principal, row, with_private_key=True),
                config=config_struct(row.task.config),
            )

    @rpc
    def KillShell(
        self, request: spb.KillShellRequest, context: grpc.ServicerContext
    ) -> spb.KillShellResponse:
        principal = self.user(context)
        task_lifecycle.kill_by_user(self.ctx, principal, request.shell_id, TaskKind.SHELL)
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.shell_id, TaskKind.SHELL)
            return spb.KillShellResponse(shell=shell_message(s, principal, row))

    @rpc
    def SetShellPriority(
        self, request: spb.SetShellPriorityRequest, context: grpc.ServicerContext
    ) -> spb.SetShellPriorityResponse:
        principal = self.user(context)
        task_lifecycle.set_priority(self.ctx, principal, request.shell_id, TaskKind.SHELL, request.priority)
        with self.ctx.db.read() as s:
            row = reads.task_row(s, request.shell_id, TaskKind.SHELL)
            return spb.SetShellPriorityResponse(shell=shell_message(s, principal, row))
