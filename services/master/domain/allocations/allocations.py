"""Allocations: one run of a task (a trial, a command, a generic task) on agent slots. Placement,
signals (preempt, kill), container state changes, and the end of an allocation, which hands over to
its owner's lifecycle (the trial's, or the task's for every other kind).

Exit classification (Determined's rules, see reference §1.6–1.7):
  killed      — the master asked for a kill (user kill, or a graceful stop that timed out)
  transient   — the infrastructure failed (agent lost, never started): retried, not counted, but
                MAX_START_FAILURES_IN_A_ROW such ends before the task ever ran count as an error
  error       — a container failed (its code exited non-zero, or could not start): the others
                were stopped because of it, and the allocation counts once against max_restarts
  preempted   — a graceful stop that the code acknowledged and exited 0 from
  clean       — exit 0 otherwise: the code decided it was done

A multi-container allocation lives and dies as one unit (Determined's `crash`): the first container
that fails is recorded (`failed_rank`) and every other container is stopped. Stopping those
siblings is the consequence of the failure, not a kill the master was asked for, so it never turns
the failure into "killed" (retried forever) or "transient" (not counted).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import func, select

from cairn.agent.v1 import agent_pb2 as apb
from services.common.logging import get_logger
from services.master.domain.allocations.command_spec import build_command_spec
from services.master.domain.allocations.rendezvous import (
    PORT_BLOCKS,
    agent_address,
    cluster_port_shift,
    free_port_offset,
    rendezvous_for,
)
from services.master.domain.allocations.task_services import service_environment, service_mounts
from services.master.domain.allocations.task_spec import build_task_spec
from services.master.domain.config import config_view
from services.master.domain.identity.auth import hash_token, new_token
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import NOT_CONNECTED, MasterContext, Work
from services.master.domain.kernel.states import LIVE_ALLOCATION, allocation_advances
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.domain.kernel.topics import allocation_topic, task_topic, trial_topic
from services.master.store import models

log = get_logger(__name__)


class Outcome(StrEnum):
    KILLED = "killed"
    TRANSIENT = "transient"
    PREEMPTED = "preempted"
    CLEAN = "clean"
    ERROR = "error"


# Failure types (as stored) that are the infrastructure's fault, not the code's.
TRANSIENT_FAILURES = frozenset({"agent_failed", "aborted"})

# An infrastructure failure is retried without counting against max_restarts. But an agent that
# fails every start the same way (an image whose interpreter cannot load, a broken runtime) would
# have the task placed, failed and placed again forever, thousands of times a minute: this many
# transient ends in a row, none of which ever reached RUNNING, count as one error of the task's
# (the 5th, the 10th... of a streak).
MAX_START_FAILURES_IN_A_ROW = 5

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
}


def classify(alloc: models.Allocation) -> Outcome:
    if alloc.kill_requested:
        return Outcome.KILLED
    if alloc.failure_type in TRANSIENT_FAILURES:
        return Outcome.TRANSIENT
    if alloc.failed_rank is not None:
        return Outcome.ERROR
    if alloc.exit_code == 0 and alloc.preempt_requested and alloc.preempt_acked:
        return Outcome.PREEMPTED
    if alloc.exit_code == 0 and alloc.failure_type in ("", "killed"):
        return Outcome.CLEAN
    return Outcome.ERROR


def transition(ctx: MasterContext, w: Work, alloc: models.Allocation, target: A, reason: str = "") -> bool:
    """Every change of an allocation's state: forward only ("most progressed wins": agents' reports
    may arrive late or twice, and a stale one is refused, returning False), stamping the times,
    logging the reason and publishing the change."""
    if not allocation_advances(alloc.state, target):
        return False
    previous = alloc.state
    alloc.state = target
    now = utcnow()
    if target == A.ASSIGNED:
        alloc.assigned_at = now
    elif target == A.RUNNING and alloc.start_time is None:
        alloc.start_time = now
    elif target == A.TERMINATED:
        alloc.end_time = now
        # Nothing is left to hand over.
        alloc.releasing = False
        # Its slots are free: whatever waits can start now, not at the next periodic pass.
        w.later(ctx.scheduler_wakeup.set)
    _publish(ctx, w, alloc)
    log.info(
        "allocation state",
        allocation_id=alloc.id,
        previous=previous,
        state=target.value,
        reason=reason or None,
    )
    return True


def _exited(ctx: MasterContext, w: Work, alloc: models.Allocation, outcome: Outcome) -> None:
    """Tell the allocation's owner (the trial's or the task's lifecycle, through the hooks wiring.py
    registers)."""
    if not ctx.allocation_exit_hooks:
        raise RuntimeError(NOT_CONNECTED)
    for hook in ctx.allocation_exit_hooks:
        hook(w, alloc, outcome.value)


def live_allocation(w: Work, trial_id: int) -> models.Allocation | None:
    return w.session.scalar(
        select(models.Allocation)
        .where(models.Allocation.trial_id == trial_id, models.Allocation.state != A.TERMINATED)
        .order_by(models.Allocation.run_id.desc())
        .limit(1)
    )


def live_of_trials(w: Work, trial_ids: list[int]) -> dict[int, models.Allocation]:
    """The live allocation of each of the trials that has one, in one query (the latest, as
    live_allocation picks)."""
    found: dict[int, models.Allocation] = {}
    for alloc in w.session.scalars(
        select(models.Allocation)
        .where(models.Allocation.trial_id.in_(trial_ids), models.Allocation.state != A.TERMINATED)
        .order_by(models.Allocation.run_id)
    ):
        if alloc.trial_id is not None:
            found[alloc.trial_id] = alloc
    return found


def containers_of(w: Work, alloc: models.Allocation) -> list[models.Container]:
    return list(
        w.session.scalars(
            select(models.Container)
            .where(models.Container.allocation_id == alloc.id)
            .order_by(models.Container.rank)
        )
    )


def _publish(ctx: MasterContext, w: Work, alloc: models.Allocation) -> None:
    owner = trial_topic(alloc.trial_id) if alloc.trial_id is not None else task_topic(alloc.task_id)
    topics = (allocation_topic(alloc.id), owner)

    def publish() -> None:
        for topic in topics:
            ctx.topics.publish(topic)

    w.later(publish)


def _pending(**fields: Any) -> models.Allocation:
    """A new allocation request: PENDING, unplaced, with nothing asked of it yet."""
    return models.Allocation(
        state=A.PENDING,
        placements=[],
        token_hash="",
        failure_type="",
        preempt_requested=False,
        preempt_reason="",
        preempt_acked=False,
        kill_requested=False,
        is_ready=False,
        **fields,
    )


def request(ctx: MasterContext, w: Work, trial: models.Trial, exp: models.Experiment) -> models.Allocation:
    """A new allocation request for the trial; the scheduler places it."""
    return request_many(ctx, w, [trial], exp)[0]


def request_many(
    ctx: MasterContext, w: Work, trials: list[models.Trial], exp: models.Experiment
) -> list[models.Allocation]:
    """New allocation requests for the trials (none has a live one), in one flush."""
    view = config_view(exp.config)
    made: list[models.Allocation] = []
    for trial in trials:
        trial.run_id += 1
        made.append(
            _pending(
                id=f"{exp.id}.{trial.id}.{trial.run_id}",
                task_id=trial_task_id(exp.id, trial.request_id),
                trial_id=trial.id,
                run_id=trial.run_id,
                slots=view.slots_per_trial,
                resource_pool=exp.resource_pool,
                priority=view.priority,
                # Queue order within the experiment is the trials' order: a trial resumed (promoted,
                # restarted, unpaused) goes before trials created after it.
                requested_at=trial.start_time,
            )
        )
    w.session.add_all(made)
    w.session.flush()
    for alloc in made:
        _publish(ctx, w, alloc)
    w.later(ctx.scheduler_wakeup.set)
    if len(made) == 1:
        log.info(
            "allocation requested", allocation_id=made[0].id, trial_id=made[0].trial_id, slots=made[0].slots
        )
    else:
        log.info(
            "allocations requested",
            experiment_id=exp.id,
            count=len(made),
            allocation_ids=f"{made[0].id}..{made[-1].id}",
            slots=made[0].slots,
        )
    return made


def request_for_task(ctx: MasterContext, w: Work, task: models.Task) -> models.Allocation:
    """A new allocation request for a task that is not a trial (of any kind): the
    same scheduler places it, with the slots, pool and priority its config asked for."""
    task.run_id += 1
    alloc = _pending(
        id=f"{task.id}.{task.run_id}",
        task_id=task.id,
        trial_id=None,
        run_id=task.run_id,
        slots=task.slots,
        resource_pool=task.resource_pool,
        priority=task.priority,
        requested_at=utcnow(),
    )
    w.session.add(alloc)
    w.session.flush()
    _publish(ctx, w, alloc)
    w.later(ctx.scheduler_wakeup.set)
    log.info("allocation requested", allocation_id=alloc.id, task_id=task.id, slots=alloc.slots)
    return alloc


def _spec_for(ctx: MasterContext, w: Work, alloc: models.Allocation, token: str) -> apb.TaskSpec:
    """What the agents run: a trial's harness and environment, or a task's own command."""
    if alloc.trial_id is None:
        task = w.session.get_one(models.Task, alloc.task_id)
        owner = w.session.get_one(models.User, task.owner_id)
        spec = build_command_spec(ctx.settings, task, alloc, token, owner.username)
        spec.environment.update(service_environment(ctx, w, task, alloc))
        spec.mounts.extend(service_mounts(w, task))
        digest = w.session.scalar(
            select(models.TaskContext.digest).where(models.TaskContext.task_id == task.id)
        )
        spec.context_digest = digest or ""
        return spec
    # One read for the trial, its experiment, the owner's name and the archive's digest (the
    # column alone: the archive itself is not read here; the agent fetches it, when it must). Four
    # reads, the first flushing the allocation's changes, were a third of a hand-over's assignment.
    with w.session.no_autoflush:
        trial, exp, username, digest = w.session.execute(
            select(models.Trial, models.Experiment, models.User.username, models.ModelDefinition.digest)
            .join(models.Experiment, models.Experiment.id == models.Trial.experiment_id)
            .join(models.User, models.User.id == models.Experiment.owner_id)
            .outerjoin(models.ModelDefinition, models.ModelDefinition.experiment_id == models.Experiment.id)
            .where(models.Trial.id == alloc.trial_id)
        ).one()
    alloc.searcher_target = trial.searcher_target
    spec = build_task_spec(ctx.settings, exp, trial, alloc, token, username)
    spec.context_digest = digest or ""
    return spec


def assign(
    ctx: MasterContext,
    w: Work,
    alloc: models.Allocation,
    placements: list[dict[str, object]],
    port_offsets: PortOffsets | None,
    releasing: Mapping[str, tuple[str, set[str]]],
) -> None:
    """The scheduler placed the allocation: record it and tell the agents to start it, one container
    per agent, each with the allocation's rendezvous info and its own container rank.
    `port_offsets`: the live allocations' port offsets, when the caller keeps them (a pass that
    starts several); else they are counted from the database. `releasing`: the live containers of
    allocations that released their slots early (release_early) on these agents, id → (agent,
    slots); a start on their slots waits for them."""
    token = new_token()
    alloc.placements = placements
    alloc.token_hash = hash_token(token)
    if port_offsets is None:
        port_offsets = PortOffsets.counted(w)
    alloc.port_offset = port_offsets.take()
    spec = _spec_for(ctx, w, alloc, token)
    agent_ids = [str(p["agent_id"]) for p in placements]
    addresses = {
        agent.id: agent_address(agent.addresses)
        for agent in w.session.scalars(select(models.Agent).where(models.Agent.id.in_(agent_ids)))
    }
    slot_lists = [[str(s) for s in p["slot_ids"]] for p in placements]  # type: ignore[attr-defined]
    container_addrs = [addresses.get(a, "") for a in agent_ids]
    slot_counts = [len(slots) for slots in slot_lists]
    shift = cluster_port_shift(ctx.cluster_id)
    for rank, (agent_id, slot_ids) in enumerate(zip(agent_ids, slot_lists, strict=True)):
        container_id = f"{alloc.id}.{rank}"
        w.session.add(
            models.Container(
                id=container_id,
                allocation_id=alloc.id,
                agent_id=agent_id,
                rank=rank,
                slot_ids=slot_ids,
                state=A.ASSIGNED,
                acked_seq=0,
            )
        )
        command = apb.MasterMessage(
            start=apb.StartContainer(
                command_id=uuid.uuid4().hex,
                container_id=container_id,
                allocation_id=alloc.id,
                slot_ids=slot_ids,
                spec=spec,
                rendezvous=rendezvous_for(container_addrs, slot_counts, rank, alloc.port_offset, shift),
                after_container_ids=sorted(
                    c_id
                    for c_id, (c_agent, c_slots) in releasing.items()
                    if c_agent == agent_id and c_slots & set(slot_ids)
                ),
            )
        )
        w.later(lambda a=agent_id, c=command: ctx.hub.send(a, c))  # type: ignore[misc]
    transition(ctx, w, alloc, A.ASSIGNED, f"placed on {', '.join(agent_ids)}")


def release_early(ctx: MasterContext, w: Work, alloc: models.Allocation) -> bool:
    """The allocation's task said it is exiting (its Core API closed cleanly, its process is ending):
    its slots are offered to the next allocation at once, instead of after the agent has seen the
    exit, reported it and been sent the next start (a trial's turnover, ~70 ms of control plane).
    The next container is started by the agent once this one's has ended (assign's
    `releasing`), so the two never run at once. Only a running allocation of one
    container releases: a multi-container one ends with its last container, which the chief's word
    says nothing of. True when its slots are (now or already) released."""
    if alloc.releasing:
        return True
    if alloc.state != A.RUNNING or len(alloc.placements or []) != 1:
        return False
    alloc.releasing = True
    log.info("allocation releasing its slots early", allocation_id=alloc.id, placements=alloc.placements)
    w.later(ctx.scheduler_wakeup.set)
    return True


class PortOffsets:
    """How many live allocations hold each port block (rendezvous.py), to give the next one the
    lowest free block."""

    def __init__(self, in_use: Iterable[tuple[int | None, int]]) -> None:
        self.counts = [0] * PORT_BLOCKS
        for offset, holders in in_use:
            if offset is not None:
                self.counts[offset % PORT_BLOCKS] += holders

    @classmethod
    def counted(cls, w: Work) -> PortOffsets:
        # Counted by the database: a pass beside 10,000 live allocations reads a thousand counts
        # at most, not 10,000 offsets.
        return cls(
            (offset, holders)
            for offset, holders in w.session.execute(
                select(models.Allocation.port_offset, func.count())
                .where(
                    models.Allocation.state.in_(list(LIVE_ALLOCATION)),
                    models.Allocation.port_offset.is_not(None),
                )
                .group_by(models.Allocation.port_offset)
            )
        )

    @classmethod
    def of_counts(cls, counts: list[int]) -> PortOffsets:
        offsets = cls(())
        offsets.counts = list(counts)
        return offsets

    def take(self) -> int:
        offset = free_port_offset(self.counts)
        self.counts[offset] += 1
        return offset


def _end_unplaced(ctx: MasterContext, w: Work, alloc: models.Allocation, reason: str) -> None:
    alloc.failure_type = "aborted"
    alloc.exit_reason = reason
    transition(ctx, w, alloc, A.TERMINATED, f"ended before it was placed: {reason}")
    _exited(ctx, w, alloc, Outcome.TRANSIENT)


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
        _end_unplaced(ctx, w, alloc, reason)
        return
    if alloc.state in (A.ASSIGNED, A.PULLING, A.STARTING):
        # The code is not running yet, so nobody would see the signal: stop it right away.
        request_kill(ctx, w, alloc, grace_seconds=ctx.settings.kill_grace_s, reason=reason)
        return
    alloc.preempt_requested = True
    alloc.preempt_reason = reason
    alloc.kill_deadline = utcnow() + timedelta(seconds=_preemption_timeout_of(ctx, w, alloc))
    # Not a state change: the allocation runs on until its code exits (or the deadline passes).
    _publish(ctx, w, alloc)
    log.info("allocation preemption requested", allocation_id=alloc.id, reason=reason)


def request_kill(
    ctx: MasterContext, w: Work, alloc: models.Allocation, *, grace_seconds: int, reason: str
) -> None:
    if alloc.state == A.TERMINATED:
        return
    if alloc.state == A.PENDING:
        _end_unplaced(ctx, w, alloc, reason)
        return
    first = not alloc.kill_requested
    alloc.kill_requested = True
    if alloc.exit_reason is None:
        alloc.exit_reason = reason
    if not transition(ctx, w, alloc, A.TERMINATING, f"kill: {reason}"):
        _publish(ctx, w, alloc)  # the kill itself is news to the code's signal watchers
    send_kills(ctx, w, alloc, grace_seconds, reason)
    if first:
        log.info("allocation kill requested", allocation_id=alloc.id, reason=reason, grace=grace_seconds)


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


def _move_container(container: models.Container, target: A) -> bool:
    """Every change of a container's state: forward only, as its allocation's (a report that would
    move it back, or an end reported twice, changes nothing and says so)."""
    if not allocation_advances(container.state, target):
        return False
    container.state = target
    return True


def on_container_state(ctx: MasterContext, w: Work, message: apb.ContainerStateChanged) -> None:
    container = w.session.get(models.Container, message.container_id)
    if container is None:
        log.warning("state change for unknown container", container_id=message.container_id)
        return
    if message.seq and message.seq <= container.acked_seq:
        return  # resent after a reconnect; already applied
    container.acked_seq = max(container.acked_seq, message.seq)
    state = CONTAINER_STATE_NAMES.get(message.state)
    if state is None:
        return
    alloc = w.session.get_one(models.Allocation, container.allocation_id)
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
    if failure and alloc.failure_type in ("", "killed"):
        alloc.failure_type = failure
    others = [c for c in containers_of(w, alloc) if c.id != container.id and c.state != A.TERMINATED]
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


def never_started_in_a_row(w: Work, alloc: models.Allocation) -> int:
    """How many of the task's latest allocations, this one included, ended as the infrastructure's
    failure without ever running (looking back at most _STREAK_LOOKBACK allocations)."""
    recent = w.session.execute(
        select(
            models.Allocation.id,
            models.Allocation.state,
            models.Allocation.start_time,
            models.Allocation.failure_type,
        )
        .where(models.Allocation.task_id == alloc.task_id)
        .order_by(models.Allocation.run_id.desc())
        .limit(_STREAK_LOOKBACK)
    ).all()
    count = 0
    for earlier in recent:
        ended = earlier.id == alloc.id or earlier.state == A.TERMINATED
        if not ended or earlier.start_time is not None or earlier.failure_type not in TRANSIENT_FAILURES:
            break
        count += 1
    return count


# Every MAX_START_FAILURES_IN_A_ROW-th failed start of a streak counts, so a streak is read back
# far enough for any max_restarts a config may reasonably hold.
_STREAK_LOOKBACK = MAX_START_FAILURES_IN_A_ROW * 64


def finish(ctx: MasterContext, w: Work, alloc: models.Allocation) -> None:
    """Every container has ended: the allocation ends, classified, and its trial hears of it."""
    outcome = classify(alloc)
    if (
        outcome == Outcome.TRANSIENT
        and alloc.start_time is None
        and never_started_in_a_row(w, alloc) % MAX_START_FAILURES_IN_A_ROW == 0
    ):
        outcome = Outcome.ERROR
        alloc.exit_reason = (
            f"{alloc.exit_reason or 'the infrastructure failed'} "
            f"({MAX_START_FAILURES_IN_A_ROW} starts in a row failed this way: counted as a failure)"
        )
    if not transition(ctx, w, alloc, A.TERMINATED, f"ended: {outcome.value}"):
        return
    log.info(
        "allocation ended",
        allocation_id=alloc.id,
        exit_code=alloc.exit_code,
        failure=alloc.failure_type,
        outcome=outcome.value,
    )
    _exited(ctx, w, alloc, outcome)


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
