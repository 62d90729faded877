"""Determined's routes for the interactive task kinds (commands, notebooks, shells, TensorBoards),
served by one implementation. Each kind has five routes (for notebooks: LaunchNotebook,
GetNotebooks, GetNotebook, KillNotebook, SetNotebookPriority), and each route's body is the same
for every kind: a kind is one row here (KindRoutes: its protobuf module and its name in
Determined's messages, which names its requests, responses and fields) plus its description in the
domain (task_kinds/), which says what its message shows beyond a command's fields. TaskKindsApi
binds each kind's five routes by their RPC names (routes_of); the stock client's routes and
messages are Determined's and stay as they are.

The one route that is a notebook's own (IdleNotebook) is here too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from sqlalchemy.orm import Session

from cairn.api.v1 import command_pb2, common_pb2, notebook_pb2, shell_pb2, tensorboard_pb2
from cairn.wire import python_to_struct, whole_numbers
from services.common.principal import Principal
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.states import TASK_ENDED, TaskKind, TaskState
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.reads import tasks as reads
from services.master.domain.task_kinds import registry
from services.master.domain.task_kinds.model_definition import ContextFile
from services.master.domain.tasks import notebook_idle
from services.master.domain.tasks import tasks as task_lifecycle
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.api.tasks import ALLOCATION_STATES, State
from services.master.servicers.errors import named_rpc, rpc
from services.master.store import models


def context_files(files: Any) -> list[ContextFile]:
    return [
        ContextFile(path=f.path, type=f.type, content=f.content, mtime=f.mtime, mode=f.mode) for f in files
    ]


def request_config(request: Any) -> dict[str, Any]:
    """A launch's config: a Struct holds every number as a double, so 0.0 slots is 0 slots."""
    return whole_numbers(json_format.MessageToDict(request.config)) if request.HasField("config") else {}


def _exit_status(task: models.Task) -> str:
    if task.state == TaskState.CANCELED:
        return "killed"
    if task.state not in (TaskState.COMPLETED, TaskState.ERROR):
        return ""
    if task.exit_code is not None:
        return f"exited with code {task.exit_code}"
    return task.exit_reason or task.state.lower()


def task_fields(row: reads.TaskRow) -> dict[str, Any]:
    """A command's fields, by Determined's names: what every kind's message shows of its task."""
    task = row.task
    state = ALLOCATION_STATES[A(row.allocation.state)] if row.allocation is not None else State.STATE_QUEUED
    fields: dict[str, Any] = {
        "id": task.id,
        "description": task.description,
        "state": State.STATE_TERMINATED if task.state in TASK_ENDED else state,
        "start_time": convert.ts(task.start_time),
        "username": row.username,
        "display_name": row.username,
        "user_id": task.owner_id,
        "resource_pool": task.resource_pool,
        "exit_status": _exit_status(task),
        "job_id": task.job_id,
        "workspace_id": task.workspace_id or 0,
    }
    if task.exit_code is not None:
        fields["exit_code"] = task.exit_code
    return fields


def _no_arguments(request: Any) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class KindRoutes:
    """A kind's routes: its protobuf module and its name in Determined's messages ("Notebook":
    LaunchNotebookRequest, GetNotebooksResponse.notebooks, KillNotebookRequest.notebook_id...)."""

    kind: TaskKind
    module: ModuleType
    name: str
    # What its launch request names beside the config (a TensorBoard's experiments and trials).
    launch_arguments: Callable[[Any], dict[str, Any]] = field(default=_no_arguments)

    @property
    def field(self) -> str:
        return self.name.lower()

    def message(self, name: str) -> Any:
        return getattr(self.module, name.format(self.name))


def _tensorboard_sources(request: tensorboard_pb2.LaunchTensorboardRequest) -> dict[str, Any]:
    return {"experiment_ids": list(request.experiment_ids), "trial_ids": list(request.trial_ids)}


COMMANDS = KindRoutes(TaskKind.COMMAND, command_pb2, "Command")
NOTEBOOKS = KindRoutes(TaskKind.NOTEBOOK, notebook_pb2, "Notebook")
SHELLS = KindRoutes(TaskKind.SHELL, shell_pb2, "Shell")
TENSORBOARDS = KindRoutes(TaskKind.TENSORBOARD, tensorboard_pb2, "Tensorboard", _tensorboard_sources)
ROUTES = (COMMANDS, NOTEBOOKS, SHELLS, TENSORBOARDS)


def kind_message(
    s: Session, principal: Principal, routes: KindRoutes, row: reads.TaskRow, *, secrets: bool = False
) -> Message:
    """The kind's Determined message of a task: the command's fields its message has, and what
    its description shows beyond them (`secrets`: a launch's or a get's answer, never a list's)."""
    message_type = routes.message("{}")
    shown = {**task_fields(row), **registry.description(routes.kind).shows(s, principal, row, secrets)}
    known = message_type.DESCRIPTOR.fields_by_name
    result: Message = message_type(**{name: value for name, value in shown.items() if name in known})
    return result


def _answer(s: Session, principal: Principal, routes: KindRoutes, task_id: str, response: str) -> Any:
    """The kind's message of the task, in the route's response (a kill's, a priority's)."""
    row = reads.task_row(s, task_id, routes.kind)
    return routes.message(response)(**{routes.field: kind_message(s, principal, routes, row)})


# The bodies of every kind's routes, each given the servicer and the kind's row (routes_of).


def _launch(api: ServicerBase, routes: KindRoutes, request: Any, context: grpc.ServicerContext) -> Any:
    principal = api.user(context)
    response = routes.message("Launch{}Response")
    launch = task_lifecycle.TaskRequest(
        kind=routes.kind,
        config=request_config(request),
        files=context_files(request.files),
        workspace_id=request.workspace_id or None,
        arguments=routes.launch_arguments(request),
        template_name=getattr(request, "template_name", "") or None,
    )
    if getattr(request, "preview", False):  # a notebook's: the config it would run, nothing started
        return response(config=python_to_struct(task_lifecycle.launch_config(api.ctx, launch)))
    task_id = task_lifecycle.create(api.ctx, principal, launch)
    with api.ctx.db.read() as s:
        row = reads.task_row(s, task_id, routes.kind)
        message = kind_message(s, principal, routes, row, secrets=True)
        return response(**{routes.field: message}, config=python_to_struct(row.task.config or {}))


def _list(api: ServicerBase, routes: KindRoutes, request: Any, context: grpc.ServicerContext) -> Any:
    principal = api.user(context)
    visible = api.readable(context, Permission.VIEW_NSC)
    with api.ctx.db.read() as s:
        rows, page = reads.task_page(
            s,
            routes.kind,
            usernames=tuple(request.users),
            user_ids=tuple(request.user_ids),
            workspace_id=request.workspace_id or None,
            newest_first=request.order_by == common_pb2.ORDER_BY_DESC,
            offset=request.offset,
            limit=request.limit,
            visible=visible,
        )
        messages = [kind_message(s, principal, routes, row) for row in rows]
    return routes.message("Get{}sResponse")(
        **{f"{routes.field}s": messages}, pagination=convert.pagination(page)
    )


def _get(api: ServicerBase, routes: KindRoutes, request: Any, context: grpc.ServicerContext) -> Any:
    principal = api.user(context)
    with api.ctx.db.read() as s:
        row = reads.task_row(s, getattr(request, f"{routes.field}_id"), routes.kind)
        access.check_task_readable(s, principal, row.task)
        message = kind_message(s, principal, routes, row, secrets=True)
        return routes.message("Get{}Response")(
            **{routes.field: message}, config=python_to_struct(row.task.config or {})
        )


def _kill(api: ServicerBase, routes: KindRoutes, request: Any, context: grpc.ServicerContext) -> Any:
    principal = api.user(context)
    task_id = getattr(request, f"{routes.field}_id")
    task_lifecycle.kill_by_user(api.ctx, principal, task_id, routes.kind)
    with api.ctx.db.read() as s:
        return _answer(s, principal, routes, task_id, "Kill{}Response")


def _set_priority(api: ServicerBase, routes: KindRoutes, request: Any, context: grpc.ServicerContext) -> Any:
    principal = api.user(context)
    task_id = getattr(request, f"{routes.field}_id")
    task_lifecycle.set_priority(api.ctx, principal, task_id, routes.kind, request.priority)
    with api.ctx.db.read() as s:
        return _answer(s, principal, routes, task_id, "Set{}PriorityResponse")


Body = Callable[[ServicerBase, KindRoutes, Any, grpc.ServicerContext], Any]
Handler = Callable[[ServicerBase, Any, grpc.ServicerContext], Any]
# A kind's five routes: their names ("{}": the kind's name) and bodies, in routes_of's order.
ROUTE_NAMES: tuple[tuple[str, Body], ...] = (
    ("Launch{}", _launch),
    ("Get{}s", _list),
    ("Get{}", _get),
    ("Kill{}", _kill),
    ("Set{}Priority", _set_priority),
)


def _route(name: str, body: Body, routes: KindRoutes) -> Handler:
    def handler(self: ServicerBase, request: Any, context: grpc.ServicerContext) -> Any:
        return body(self, routes, request, context)

    return named_rpc(name, handler)


def routes_of(routes: KindRoutes) -> tuple[Handler, Handler, Handler, Handler, Handler]:
    """The kind's Launch, list, Get, Kill and SetPriority handlers, in that order."""
    launch, listing, get, kill, priority = (
        _route(template.format(routes.name), body, routes) for template, body in ROUTE_NAMES
    )
    return launch, listing, get, kill, priority


class TaskKindsApi(ServicerBase):
    """Every kind's routes by their RPC names (a test checks each handler is named as bound)."""

    LaunchCommand, GetCommands, GetCommand, KillCommand, SetCommandPriority = routes_of(COMMANDS)
    LaunchNotebook, GetNotebooks, GetNotebook, KillNotebook, SetNotebookPriority = routes_of(NOTEBOOKS)
    LaunchShell, GetShells, GetShell, KillShell, SetShellPriority = routes_of(SHELLS)
    LaunchTensorboard, GetTensorboards, GetTensorboard, KillTensorboard, SetTensorboardPriority = routes_of(
        TENSORBOARDS
    )

    @rpc
    def IdleNotebook(
        self, request: notebook_pb2.IdleNotebookRequest, context: grpc.ServicerContext
    ) -> notebook_pb2.IdleNotebookResponse:
        notebook_idle.report_idle(self.ctx, self.caller(context), request.notebook_id, request.idle)
        return notebook_pb2.IdleNotebookResponse()
