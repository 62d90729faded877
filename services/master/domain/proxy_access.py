"""Who may reach a task's service through the master's proxy, and where it is.

The task's owner or an admin, while the task runs and its service has said it is ready. Every
refusal names why, so a browser tab left open on an ended notebook shows what happened to it.
The address is read from the allocation's row (task_services.mark_ready wrote it), never asked of
an agent, so the proxy works the same after a master restart.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.errors import FailedPrecondition, NotFound, PermissionDenied
from services.master.domain.states import LIVE_ALLOCATION, TASK_ENDED
from services.master.domain.task_services import SERVICE_KINDS
from services.master.store import models


class TaskEnded(FailedPrecondition):
    """The task has ended: nothing serves at its proxy path any more."""


class NotReady(FailedPrecondition):
    """The task runs but its service does not answer yet (or it is not placed)."""


def proxy_address(s: Session, principal: Principal, task_id: str) -> str:
    """host:port of the task's service, for this principal; NotFound, PermissionDenied, TaskEnded
    or NotReady, each naming the task."""
    task = s.get(models.Task, task_id)
    if task is None or task.kind not in SERVICE_KINDS:
        raise NotFound(f"task {task_id}: no task that serves through the proxy has this id")
    if not (principal.admin or principal.internal or principal.user_id == task.owner_id):
        raise PermissionDenied(
            f"task {task_id} belongs to another user; only its owner or an admin may open it"
        )
    if task.state in TASK_ENDED:
        raise TaskEnded(f"task {task_id} has ended ({task.state.lower()}): it serves nothing any more")
    alloc = s.scalar(
        select(models.Allocation)
        .where(models.Allocation.task_id == task.id, models.Allocation.state.in_(list(LIVE_ALLOCATION)))
        .order_by(models.Allocation.run_id.desc())
        .limit(1)
    )
    if alloc is None or not alloc.is_ready or not alloc.proxy_address:
        raise NotReady(f"task {task_id} is not ready yet: its service does not answer")
    return str(alloc.proxy_address)
