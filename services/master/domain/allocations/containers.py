"""What agents report of an allocation's containers: each state change moves the container and its
allocation forward; a container's end (its exit code and failure) decides the allocation's end, the
first rank to fail stops the others, and containers an agent refused or lost end as such."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy import bindparam, select

from cairn.agent.v1 import agent_pb2 as apb
from services.common.logging import get_logger
from services.master.domain.allocations.allocations import DEVICE_FAILED, containers_of, finish, transition
from services.master.domain.allocations.stops import send_kills
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.kernel.states import allocation_advances
from services.master.store import models

log = get_logger(__name__)


CONTAINER_STATE_NAMES = {
    apb.CONTAINER_STATE_ASSIGNED: A.ASSIGNED,
    apb.CONTAINER_STATE_PULLING: A.PULLING,
    apb.CONTAINER_STATE_STARTING: A.STARTING,
    apb.CONTAINER_STATE_RUNNING: A.RUNNING,
    apb.CONTAINER_STATE_TERMINATED: A.TERMINATED,
}


FAILURE_NAMES = {
    apb.FAILURE_TYPE_UNSPECIFIED: "",
    apb.FAILURE_TYPE_CONTAINER_FAILED: "failed",
    apb.FAILURE_TYPE_CONTAINER_ABORTED: "aborted",
    apb.FAILURE_TYPE_TASK_ERROR: "task_error",
    apb.FAILURE_TYPE_AGENT_FAILED: "agent_failed",
    apb.FAILURE_TYPE_KILLED: "killed",
    apb.FAILURE_TYPE_DEVICE_FAILED: DEVICE_FAILED,
}


def _move_container(container: models.Container, target: A) -> bool:
    """Every change of a container's state: forward only, as its allocation's (a report that would
    move it back, or an end reported twice, changes nothing and says so)."""
    if not allocation_advances(container.state, target):
        return False
    container.state = target
    return True


@dataclass(frozen=True)
class _Preloaded:
    """What `preload` read for a batch of reports: each container with its allocation, and each
    allocation's containers by rank."""

    containers: dict[str, tuple[models.Container, models.Allocation]]
    of_allocation: dict[str, list[models.Container]]


_PRELOADED = "allocations.containers.preloaded"


class ReportKey(NamedTuple):
    """What a batch's preparation needs to know of one report from an agent: its container, and
    whether the report ends it (an exit, a refused start: its allocation may end with it)."""

    container_id: str
    ends: bool


# The reads of every agent report, built once with their ids as parameters (building and keying
# a statement anew for each report cost more than its round trip).
_WITH_ALLOCATION = select(models.Container, models.Allocation).join(
    models.Allocation, models.Allocation.id == models.Container.allocation_id
)
_CONTAINER_WITH_ALLOCATION = _WITH_ALLOCATION.where(models.Container.id == bindparam("id"))
_ALLOCATIONS_OF_CONTAINERS = _WITH_ALLOCATION.where(
    models.Container.allocation_id.in_(
        select(models.Container.allocation_id).where(
            models.Container.id.in_(bindparam("ids", expanding=True))
        )
    )
).order_by(models.Container.allocation_id, models.Container.rank)


def preload(w: Work, keys: Sequence[Hashable]) -> list[models.Allocation]:
    """Before a batch of agents' reports is applied in one unit of work (the agent stream's shared
    units): the containers they name (ReportKeys), every other container of their allocations and
    the allocations, in one read, instead of a read for each report and another for each end. The
    allocations that a report may end, for the caller to read what their ends need."""
    reports = [key for key in keys if isinstance(key, ReportKey)]
    rows = w.session.execute(_ALLOCATIONS_OF_CONTAINERS, {"ids": [r.container_id for r in reports]}).all()
    found = _Preloaded({}, {})
    for container, alloc in rows:
        found.containers[container.id] = (container, alloc)
        found.of_allocation.setdefault(alloc.id, []).append(container)
    w.memo[_PRELOADED] = found
    ending: dict[str, models.Allocation] = {}
    for report in reports:
        if report.ends and report.container_id in found.containers:
            alloc = found.containers[report.container_id][1]
            ending[alloc.id] = alloc
    return list(ending.values())


def _container_with_allocation(
    w: Work, container_id: str
) -> tuple[models.Container, models.Allocation] | None:
    preloaded = w.memo.get(_PRELOADED)
    if isinstance(preloaded, _Preloaded) and container_id in preloaded.containers:
        return preloaded.containers[container_id]
    # The container with its allocation, in one read before anything changes (a read after a
    # change flushes it first: a round trip more).
    found = w.session.execute(_CONTAINER_WITH_ALLOCATION, {"id": container_id}).first()
    return None if found is None else (found[0], found[1])


def _siblings(w: Work, alloc: models.Allocation) -> list[models.Container]:
    """The allocation's containers (all stored when it started, so a read made earlier in the unit
    still holds them all)."""
    preloaded = w.memo.get(_PRELOADED)
    if isinstance(preloaded, _Preloaded) and alloc.id in preloaded.of_allocation:
        return preloaded.of_allocation[alloc.id]
    return containers_of(w, alloc)


def on_container_state(ctx: MasterContext, w: Work, message: apb.ContainerStateChanged) -> None:
    found = _container_with_allocation(w, message.container_id)
    if found is None:
        log.warning("state change for unknown container", container_id=message.container_id)
        return
    container, alloc = found
    if message.seq and message.seq <= container.acked_seq:
        return  # resent after a reconnect; already applied
    container.acked_seq = max(container.acked_seq, message.seq)
    state = CONTAINER_STATE_NAMES.get(message.state)
    if state is None:
        return
    if state == A.TERMINATED:
        container_terminated(
            ctx,
            w,
            container,
            alloc,
            exit_code=message.exit_code if message.HasField("exit_code") else None,
            failure=FAILURE_NAMES.get(message.failure_type, "failed"),
            reason=message.message,
        )
        return
    if _move_container(container, state):
        transition(ctx, w, alloc, state, f"container {container.id} is {state.value}")


def container_terminated(
    ctx: MasterContext,
    w: Work,
    container: models.Container,
    alloc: models.Allocation,
    *,
    exit_code: int | None,
    failure: str,
    reason: str,
) -> None:
    if not _move_container(container, A.TERMINATED):
        return
    container.exit_code = exit_code
    failed = exit_code not in (0, None) or failure not in ("", "killed")
    # The allocation's exit is that of its first container to end badly, else rank 0's.
    if alloc.exit_code is None or (failed and alloc.exit_code == 0):
        alloc.exit_code = exit_code
    # A device's failure is the cause whatever else the allocation's containers reported: a
    # rank's NCCL error often comes before the end of the rank whose GPU failed.
    if failure and (alloc.failure_type in ("", "killed") or failure == DEVICE_FAILED):
        alloc.failure_type = failure
    # The allocation's containers were all stored when it started, so the read needs no flush of
    # what changed above to find them (it finds them by allocation, which never changes; the
    # objects it hands back are the session's, with those changes).
    with w.session.no_autoflush:
        siblings = _siblings(w, alloc)
    others = [c for c in siblings if c.id != container.id and c.state != A.TERMINATED]
    if failed and not alloc.kill_requested and alloc.failed_rank is None:
        crash(ctx, w, alloc, container, reason, others)
    elif reason and not alloc.exit_reason:
        alloc.exit_reason = reason
    if not others:
        finish(ctx, w, alloc)


def crash(
    ctx: MasterContext,
    w: Work,
    alloc: models.Allocation,
    failed: models.Container,
    reason: str,
    others: list[models.Container],
) -> None:
    """The first container of the allocation failed: the allocation fails with it, once, and every
    other container is stopped (Determined's `crash`). The stop is not a kill: see classify()."""
    alloc.failed_rank = failed.rank
    if others:
        alloc.exit_reason = (
            f"rank {failed.rank} (agent {failed.agent_id}) failed: {reason or 'no reason given'}"
        )
    elif reason:
        alloc.exit_reason = reason
    if not others:
        return
    because = f"rank {failed.rank} of the allocation failed"
    transition(ctx, w, alloc, A.TERMINATING, because)
    send_kills(ctx, w, alloc, ctx.settings.kill_grace_s, reason=because)
    log.info(
        "a container failed; stopping the allocation's other containers",
        allocation_id=alloc.id,
        failed_rank=failed.rank,
        stopping=[c.id for c in others],
    )


def start_refused(
    ctx: MasterContext, w: Work, container_id: str, error: str, *, agent_stopping: bool = False
) -> None:
    """The agent refused to start the container: it ends, with the agent's reason, as a container
    that could not start (the allocation fails with it, and never waits on it). An agent that
    refused because it is shutting down is the infrastructure's doing: the allocation ends as
    transient (not counted against max_restarts) and its trial is placed again."""
    container = w.session.get(models.Container, container_id)
    if container is None or container.state == A.TERMINATED:
        return
    alloc = w.session.get_one(models.Allocation, container.allocation_id)
    container_terminated(
        ctx,
        w,
        container,
        alloc,
        exit_code=None,
        failure="aborted" if agent_stopping else "task_error",
        reason=f"the agent refused it: {error}",
    )


def fail_container_lost(ctx: MasterContext, w: Work, container: models.Container, reason: str) -> None:
    alloc = w.session.get_one(models.Allocation, container.allocation_id)
    container_terminated(ctx, w, container, alloc, exit_code=None, failure="agent_failed", reason=reason)
