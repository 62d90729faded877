"""Who may reach a task's service through the master's proxy, and where it is.

The task's owner or an admin, while the task runs and its service has said it is ready. Every
refusal names why, so a browser tab left open on an ended notebook shows what happened to it.
The address is read from the allocation's row (task_services.mark_ready wrote it), never asked of
an agent, so the proxy works the same after a master restart.

What the proxy serves of a task (HTTP, a TCP stream, nothing) and whether its service checks a
credential only the proxy presents are its kind's (task_kinds/). A TCP stream (a shell's) is
reached without a session, as in Determined: the ssh ProxyCommand its client runs (`python -m
determined.cli.tunnel MASTER ID`) connects with no credentials, and the shell's SSH server lets in
only the key pair the master made for it, which only the shell's owner or an admin is given. A
caller that does present a session is still held to owner-or-admin.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.common.principal import Principal
from services.master.domain.allocations import trial_proxy_ports
from services.master.domain.identity import access, scopes
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.errors import (
    FailedPrecondition,
    NotFound,
    Unauthenticated,
)
from services.master.domain.kernel.states import LIVE_ALLOCATION, TASK_ENDED
from services.master.domain.task_kinds import registry
from services.master.domain.task_kinds.kind import Proxy
from services.master.store import models


class TaskEnded(FailedPrecondition):
    """The task has ended: nothing serves at its proxy path any more."""


class NotReady(FailedPrecondition):
    """The task runs but its service does not answer yet (or it is not placed)."""


@dataclass(frozen=True)
class ProxyTarget:
    address: str  # host:port of the task's service
    tcp: bool  # a byte stream (tunnelled over a websocket), not HTTP
    service_credential: str | None = None  # what the proxy presents to the service, if anything


def proxy_target(s: Session, principal: Principal | None, service_id: str) -> ProxyTarget:
    """Where the proxy takes `principal` (None: a caller without a session) for the service
    `service_id` (a task's id, or `<task id>:<port>` for a trial's port); Unauthenticated,
    NotFound, PermissionDenied, TaskEnded or NotReady, each naming the service."""
    port_of_task = trial_proxy_ports.split_service_id(service_id)
    if port_of_task is not None:
        return _trial_port_target(s, principal, service_id, *port_of_task)
    task_id = service_id
    task = s.get(models.Task, task_id)
    proxy = registry.proxy_of(task.kind) if task is not None else Proxy.NONE
    if principal is None and proxy != Proxy.TCP:
        raise Unauthenticated("authentication required: log in to open a task")
    if task is None or proxy == Proxy.NONE:
        raise NotFound(f"task {task_id}: no task that serves through the proxy has this id")
    if principal is not None:
        # Opening a task's service acts as it (a notebook's kernel, a shell): as changing it.
        permission = Permission.UPDATE_EXPERIMENT if task.experiment_id is not None else Permission.UPDATE_NSC
        access.check_task(s, principal, task, permission, verb="open")
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
    # A service's own credential is the allocation's token hash: the task derives it from its
    # allocation token (cairn.notebook_server.service_credential), the master reads it from the
    # allocation's row; neither is anywhere else.
    credential = registry.description(task.kind).service_credential
    return ProxyTarget(
        address=str(alloc.proxy_address),
        tcp=proxy == Proxy.TCP,
        service_credential=(alloc.token_hash or None) if credential else None,
    )


def _trial_port_target(
    s: Session, principal: Principal | None, service_id: str, task_id: str, port: int
) -> ProxyTarget:
    task = s.get(models.Task, task_id)
    entry = trial_proxy_ports.registered_port(s, task, port)
    # A caller without a session learns nothing of a port that needs one, not even whether it is.
    if principal is None and (entry is None or not entry.unauthenticated):
        raise Unauthenticated("authentication required: log in to open this service")
    if task is None or entry is None:
        raise NotFound(f"service {service_id}: no trial serves this port through the proxy")
    if principal is not None:
        # As its trial's metrics: whoever may read its experiment.
        workspace_id = scopes.of_task(s, task)
        access.check_readable(
            principal, Permission.VIEW_EXPERIMENT_METADATA, workspace_id, f"service {service_id}", s
        )
    if task.state in TASK_ENDED:
        ended = task.state.lower()
        raise TaskEnded(f"service {service_id}: its trial has ended ({ended}); it serves nothing any more")
    host = trial_proxy_ports.chief_address(s, task_id)
    if host is None:
        raise NotReady(
            f"service {service_id} is not ready yet: the trial's chief is not running"
            " (it waits for resources, starts, or is paused)"
        )
    return ProxyTarget(address=trial_proxy_ports.address(host, port), tcp=entry.tcp)


def proxy_address(s: Session, principal: Principal, task_id: str) -> str:
    """host:port of the task's service, for this principal (see proxy_target)."""
    return proxy_target(s, principal, task_id).address
