"""Stopping an allocation: a graceful preemption (trial code is asked to checkpoint and exit, and is
killed if it has not by the deadline) or a kill sent to each of its containers; an allocation not
placed yet simply ends."""

from __future__ import annotations

import uuid
from datetime import timedelta

from cairn.agent.v1 import agent_pb2 as apb
from services.common.logging import get_logger
from services.master.domain.allocations.allocations import (
    DEVICE_FAILED,
    containers_of,
    end_unplaced,
    publish,
    transition,
)
from services.master.domain.config import config_view
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.states import AllocationState as A
from services.master.store import models

log = get_logger(__name__)


def preemption_timeout(ctx: MasterContext, exp: models.Experiment) -> int:
    configured = config_view(exp.config).preemption_timeout
    return configured if configured is not None else ctx.settings.preemption_timeout_s


def _preemption_timeout_of(ctx: MasterContext, w: Work, alloc: models.Allocation) -> int:
    if alloc.trial_id is None:
        return ctx.settings.preemption_timeout_s
    trial = w.session.get_one(models.Trial, alloc.trial_id)
    return preemption_timeout(ctx, w.session.get_one(models.Experiment, trial.experiment_id))


def request_preempt(ctx: MasterContext, w: Work, alloc: models.Allocation, reason: str) -> None:
    """Ask the trial code to checkpoint and exit; it is killed if it has not after the timeout."""
    if alloc.state == A.TERMINATED or alloc.kill_requested or alloc.preempt_requested:
        return
    if alloc.state == A.PENDING:
        end_unplaced(ctx, w, alloc, reason)
        return
    if alloc.state in (A.ASSIGNED, A.PULLING, A.STARTING):
        # The code is not running yet, so nobody would see the signal: stop it right away.
        request_kill(ctx, w, alloc, grace_seconds=ctx.settings.kill_grace_s, reason=reason)
        return
    alloc.preempt_requested = True
    alloc.preempt_reason = reason
    now = utcnow()
    alloc.preempt_requested_at = now
    alloc.kill_deadline = now + timedelta(seconds=_preemption_timeout_of(ctx, w, alloc))
    # Not a state change: the allocation runs on until its code exits (or the deadline passes).
    publish(ctx, w, alloc)
    log.info("allocation preemption requested", allocation_id=alloc.id, reason=reason)


def request_kill(
    ctx: MasterContext, w: Work, alloc: models.Allocation, *, grace_seconds: int, reason: str
) -> None:
    if alloc.state == A.TERMINATED:
        return
    if alloc.state == A.PENDING:
        end_unplaced(ctx, w, alloc, reason)
        return
    first = not alloc.kill_requested
    alloc.kill_requested = True
    if alloc.exit_reason is None:
        alloc.exit_reason = reason
    if not transition(ctx, w, alloc, A.TERMINATING, f"kill: {reason}"):
        publish(ctx, w, alloc)  # the kill itself is news to the code's signal watchers
    send_kills(ctx, w, alloc, grace_seconds, reason)
    if first:
        log.info("allocation kill requested", allocation_id=alloc.id, reason=reason, grace=grace_seconds)


def stop_for_device(ctx: MasterContext, w: Work, alloc: models.Allocation, reason: str) -> None:
    """A device the allocation runs on failed (its agent reported a GPU fault): its containers are
    stopped and its end is the machine's (`device_failed`, a transient failure: the task runs again
    elsewhere, not counted against max_restarts), whatever its containers' exits say. Not a kill:
    a kill is what the user asked for, and ends a task that is not a trial for good. A kill already
    asked for stands (it is not counted either)."""
    if alloc.state == A.TERMINATED or alloc.kill_requested:
        return
    if alloc.state == A.PENDING:
        end_unplaced(ctx, w, alloc, reason)
        return
    alloc.failure_type = DEVICE_FAILED
    alloc.exit_reason = reason
    if not transition(ctx, w, alloc, A.TERMINATING, f"device failed: {reason}"):
        publish(ctx, w, alloc)
    send_kills(ctx, w, alloc, ctx.settings.kill_grace_s, reason)
    log.warning("allocation stopped: a device it runs on failed", allocation_id=alloc.id, reason=reason)


def send_kills(
    ctx: MasterContext, w: Work, alloc: models.Allocation, grace_seconds: int, reason: str = ""
) -> None:
    for container in containers_of(w, alloc):
        if container.state == A.TERMINATED:
            continue
        command = apb.MasterMessage(
            kill=apb.KillContainer(
                command_id=uuid.uuid4().hex,
                container_id=container.id,
                grace_seconds=grace_seconds,
                reason=reason,
            )
        )
        w.later(lambda a=container.agent_id, c=command: ctx.hub.send(a, c))  # type: ignore[misc]
