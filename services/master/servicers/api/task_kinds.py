"""What the per-kind task APIs (Determined's commands, notebooks, shells, TensorBoards) share:
their listings, reads, kills and priority changes differ only in the kind and the message each
returns, so each servicer method is one call here and one conversion there."""

from __future__ import annotations

from typing import Any, Protocol

from cairn.api.v1 import common_pb2
from services.common.principal import Principal
from services.master.domain import tasks as task_lifecycle
from services.master.domain.context import MasterContext
from services.master.domain.reads import tasks as reads
from services.master.domain.states import TaskKind
from services.master.servicers.api import convert


class ListRequest(Protocol):
    """The fields every Get<Kind>sRequest has (Determined's)."""

    @property
    def users(self) -> Any: ...
    @property
    def user_ids(self) -> Any: ...
    @property
    def workspace_id(self) -> int: ...
    @property
    def order_by(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def limit(self) -> int: ...


def page_of(
    ctx: MasterContext, kind: TaskKind, request: ListRequest
) -> tuple[list[reads.TaskRow], common_pb2.Pagination]:
    """One page of the tasks of `kind` a listing request asks for, and its pagination."""
    with ctx.db.read() as s:
        rows, page = reads.task_page(
            s,
            kind,
            usernames=tuple(request.users),
            user_ids=tuple(request.user_ids),
            workspace_id=request.workspace_id or None,
            newest_first=request.order_by == common_pb2.ORDER_BY_DESC,
            offset=request.offset,
            limit=request.limit,
        )
    return rows, convert.pagination(page)


def row_of(ctx: MasterContext, task_id: str, kind: TaskKind) -> reads.TaskRow:
    with ctx.db.read() as s:
        return reads.task_row(s, task_id, kind)


def kill(ctx: MasterContext, principal: Principal, task_id: str, kind: TaskKind) -> reads.TaskRow:
    """`principal` (owner or admin) kills the task; the task as it is after."""
    task_lifecycle.kill_by_user(ctx, principal, task_id, kind)
    return row_of(ctx, task_id, kind)


def set_priority(
    ctx: MasterContext, principal: Principal, task_id: str, kind: TaskKind, priority: int
) -> reads.TaskRow:
    """`principal` (owner or admin) moves the task in its pool's queue; the task as it is after."""
    task_lifecycle.set_priority(ctx, principal, task_id, kind, priority)
    return row_of(ctx, task_id, kind)
