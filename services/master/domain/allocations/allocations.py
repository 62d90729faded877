"""Allocations: one run of a task (a trial, a command, a generic task) on agent slots. This module
holds their lifecycle: the request, every state change (`transition`), and the end, which hands over
to its owner's lifecycle (the trial's, or the task's for every other kind). Beside it: placement.py
(the scheduler's assignment applied), stops.py (preempt and kill), containers.py (what agents
report of the containers, and how a container's end decides the allocation's).

Exit classification (Determined's rules, see reference §1.6–1.7):
  killed      — the master asked for a kill (user kill, or a graceful stop that timed out)
  transient   — the infrastructure failed (agent lost, never started, a GPU failed): retried, not counted, but
                MAX_START_FAILURES_IN_A_ROW such ends before the task ever ran count as an error
  error       — a container failed (its code exited non-zero, or could not start): the others
                were stopped because of it, and the allocation counts once against max_restarts
  preempted   — a graceful stop that the code acknowledged and exited 0 from
  clean       — exit 0 otherwise: the code decided it was done

A multi-container allocation lives and dies as one unit (Determined's `crash`): the first container
that fails is recorded (`failed_rank`) and every other container is stopped. Stopping those
siblings is the consequence of the failure, not a kill the master was asked for, so it never turns
the failure into "killed" (retried forever) or "transient" (not counted)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, cast

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm.attributes import set_committed_value

from services.common.logging import get_logger
from services.master.domain.config import config_view
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import NOT_CONNECTED, MasterContext, Work
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.kernel.states import allocation_advances
from services.master.domain.kernel.task_ids import trial_task_id
from services.master.domain.kernel.topics import allocation_topic, task_topic, trial_topic
from services.master.store import models
from services.master.store.inserted import insert_rows

log = get_logger(__name__)


class Outcome(StrEnum):
    KILLED = "killed"
    TRANSIENT = "transient"
    PREEMPTED = "preempted"
    CLEAN = "clean"
    ERROR = "error"


# Failure types (as stored) that are the infrastructure's fault, not the code's: an agent lost, a
# start aborted, a GPU that failed under the code (its agent saw a critical Xid or ECC error).
DEVICE_FAILED = "device_failed"
TRANSIENT_FAILURES = frozenset({"agent_failed", "aborted", DEVICE_FAILED})


# An infrastructure failure is retried without counting against max_restarts. But an agent that
# fails every start the same way (an image whose interpreter cannot load, a broken runtime) would
# have the task placed, failed and placed again forever, thousands of times a minute: this many
# transient ends in a row, none of which ever reached RUNNING, count as one error of the task's
# (the 5th, the 10th... of a streak).
MAX_START_FAILURES_IN_A_ROW = 5


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


def transition(
    ctx: MasterContext, w: Work, alloc: models.Allocation, target: A, reason: str = "", **details: object
) -> bool:
    """Every change of an allocation's state: forward only ("most progressed wins": agents' reports
    may arrive late or twice, and a stale one is refused, returning False), stamping the times,
    logging the reason (and `details`, on the same line) and publishing the change."""
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
    publish(ctx, w, alloc)
    log.info(
        "allocation state",
        allocation_id=alloc.id,
        previous=previous,
        state=target.value,
        reason=reason or None,
        **details,
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


_CONTAINERS_OF = (
    select(models.Container)
    .where(models.Container.allocation_id == bindparam("allocation_id"))
    .order_by(models.Container.rank)
)
_CONTAINERS_OF_MANY = (
    select(models.Container)
    .where(models.Container.allocation_id.in_(bindparam("allocation_ids", expanding=True)))
    .order_by(models.Container.allocation_id, models.Container.rank)
)


# Work.memo: allocation id -> its containers, read for many allocations at once.
_CONTAINERS_READ = object()
# Allocations whose containers one query reads (the databases' bound on parameters).
_CONTAINERS_CHUNK = 900


def preload_containers(w: Work, allocation_ids: list[str]) -> None:
    """The containers of `allocation_ids` in one query a chunk, kept in the unit for containers_of.
    A unit that stops thousands of allocations (a kill of a big experiment) asked once for each,
    and each query first flushed the change made to the one before: at 8,000 running trials the
    kill held the master's lock for 8 s on PostgreSQL. An allocation's containers are all stored
    when it is placed, so a read of a placed allocation's stays whole for the rest of the unit."""
    held = cast(dict[str, list[models.Container]], w.memo.setdefault(_CONTAINERS_READ, {}))
    for start in range(0, len(allocation_ids), _CONTAINERS_CHUNK):
        chunk = allocation_ids[start : start + _CONTAINERS_CHUNK]
        for allocation_id in chunk:
            held[allocation_id] = []
        for container in w.session.scalars(_CONTAINERS_OF_MANY, {"allocation_ids": chunk}):
            held[container.allocation_id].append(container)


def containers_of(w: Work, alloc: models.Allocation) -> list[models.Container]:
    held = w.memo.get(_CONTAINERS_READ)
    if isinstance(held, dict) and alloc.id in held:
        return list(held[alloc.id])
    return list(w.session.scalars(_CONTAINERS_OF, {"allocation_id": alloc.id}))


def publish(ctx: MasterContext, w: Work, alloc: models.Allocation) -> None:
    _publish(ctx, w, alloc.id, alloc.trial_id, alloc.task_id)


def _publish(ctx: MasterContext, w: Work, allocation_id: str, trial_id: int | None, task_id: str) -> None:
    owner = trial_topic(trial_id) if trial_id is not None else task_topic(task_id)
    topics = (allocation_topic(allocation_id), owner)

    def publish() -> None:
        for topic in topics:
            ctx.topics.publish(topic)

    w.later(publish)


def _pending_row(**fields: Any) -> dict[str, Any]:
    """A new allocation request's columns: PENDING, unplaced, with nothing asked of it yet."""
    return {
        "state": A.PENDING,
        "placements": [],
        "token_hash": "",
        "failure_type": "",
        "preempt_requested": False,
        "preempt_reason": "",
        "preempt_acked": False,
        "kill_requested": False,
        "is_ready": False,
        **fields,
    }


def _pending(**fields: Any) -> models.Allocation:
    return models.Allocation(**_pending_row(**fields))


def request(ctx: MasterContext, w: Work, trial: models.Trial, exp: models.Experiment) -> None:
    """A new allocation request for the trial; the scheduler places it."""
    request_many(ctx, w, [trial], exp)


# Each trial's next run, numbered by one statement however many trials ask at once (a search's
# new trials come by the hundred, and a flush updates each changed object with its own row).
_NEXT_RUNS = (
    update(models.Trial)
    .where(models.Trial.id.in_(bindparam("ids", expanding=True)))
    .values(run_id=models.Trial.run_id + 1)
    .execution_options(synchronize_session=False)
)


def request_many(ctx: MasterContext, w: Work, trials: list[models.Trial], exp: models.Experiment) -> None:
    """New allocation requests for the trials (none has a live one), in one statement. Nothing
    in the unit that asks reads them back, so they are stored as rows, not loaded as objects:
    reading back a hundred allocations a grid makes cost more than inserting them (a unit that
    does look for one later finds it in the database, in its transaction)."""
    view = config_view(exp.config)
    if len(trials) == 1:
        trials[0].run_id += 1  # written by the flush, with the trial's other changes
    else:
        if any(trial.id is None for trial in trials):
            w.session.flush()  # the statement names the trials by id
        runs = [(trial, trial.run_id + 1) for trial in trials]
        # The rows' new run numbers, written by the statement and kept by the objects as stored
        # (a flush writes nothing more of them); the trials' other changes flush first, on its
        # execution.
        w.session.execute(_NEXT_RUNS, {"ids": [trial.id for trial in trials]})
        for trial, run_id in runs:
            set_committed_value(trial, "run_id", run_id)
    rows: list[dict[str, Any]] = []
    for trial in trials:
        rows.append(
            _pending_row(
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
    # One INSERT; the scheduling view learns the new ids from the statement, as from a flush
    # (scheduling_view.ChangeTracker).
    insert_rows(w.session, models.Allocation, rows)
    for row in rows:
        _publish(ctx, w, row["id"], row["trial_id"], row["task_id"])
    w.later(ctx.scheduler_wakeup.set)
    first = rows[0]
    if len(rows) == 1:
        log.info(
            "allocation requested",
            allocation_id=first["id"],
            trial_id=first["trial_id"],
            slots=first["slots"],
        )
    else:
        log.info(
            "allocations requested",
            experiment_id=exp.id,
            count=len(rows),
            allocation_ids=f"{first['id']}..{rows[-1]['id']}",
            slots=first["slots"],
        )


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
    publish(ctx, w, alloc)
    w.later(ctx.scheduler_wakeup.set)
    log.info("allocation requested", allocation_id=alloc.id, task_id=task.id, slots=alloc.slots)
    return alloc


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


def end_unplaced(ctx: MasterContext, w: Work, alloc: models.Allocation, reason: str) -> None:
    alloc.failure_type = "aborted"
    alloc.exit_reason = reason
    transition(ctx, w, alloc, A.TERMINATED, f"ended before it was placed: {reason}")
    _exited(ctx, w, alloc, Outcome.TRANSIENT)


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
    # One line for the end, its exit code and failure with its state (a master at INFO logs every
    # trial's end: a second line said the same again).
    ended = transition(
        ctx,
        w,
        alloc,
        A.TERMINATED,
        f"ended: {outcome.value}",
        exit_code=alloc.exit_code,
        failure=alloc.failure_type or None,
    )
    if ended:
        _exited(ctx, w, alloc, outcome)
