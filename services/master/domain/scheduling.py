"""The scheduling loop: sends the scheduler the cluster as the master sees it and applies its
decisions (placements, preemptions). Runs when something changed, at most every interval, and
re-checks every decision against the database before applying it: the cluster may have moved on
while the scheduler was thinking."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import func, select

from cairn.scheduler.v1 import scheduler_pb2 as pb
from services.common.logging import get_logger
from services.master.domain import allocations
from services.master.domain.clock import utcnow
from services.master.domain.config.view import config_view
from services.master.domain.context import MasterContext
from services.master.domain.errors import DomainError
from services.master.domain.loops import BackgroundLoop
from services.master.domain.provisioning.decide import fits_shape
from services.master.domain.reads.jobs import experiment_job_id
from services.master.domain.states import (
    LIVE_ALLOCATION,
    PLACED_ALLOCATION,
    PREEMPTIBLE_KINDS,
    RunState,
)
from services.master.domain.states import AllocationState as A
from services.master.store import models

log = get_logger(__name__)

FITTING = {"best": pb.FITTING_POLICY_BEST, "worst": pb.FITTING_POLICY_WORST}
# Without any wake-up, look again this often (agents may have freed slots).
MAX_IDLE_S = 2.0
# A pass that could only repeat the last one is skipped (SchedulingLoop._step), but never for
# longer than this.
QUIET_RECHECK_S = 10.0
# Experiments whose trials are stopping for good: their pending allocations are not offered.
STOPPED_EXPERIMENT = frozenset({RunState.STOPPING_CANCELED, RunState.STOPPING_KILLED})


@dataclass
class WaitingInfo:
    """Why each pending allocation waits, from the last pass (shown by the API)."""

    reasons: dict[str, tuple[str, int]] = field(default_factory=dict)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ts(value: datetime) -> Timestamp:
    """An aware UTC datetime (as the store gives them) as a Timestamp, by arithmetic: a pass
    converts two per allocation."""
    delta = (value if value.tzinfo is not None else value.replace(tzinfo=UTC)) - _EPOCH
    return Timestamp(seconds=delta.days * 86_400 + delta.seconds, nanos=delta.microseconds * 1000)


def _over_max_slots(rows: list[tuple[Any, int | None, int | None]]) -> dict[str, str]:
    """Pending allocations an experiment's max_slots holds back, with why: in request order, a
    pending allocation is offered only while the experiment's placed slots plus those offered
    before it leave room for it."""
    held: dict[int | None, int] = {}
    caps: dict[int | None, int | None] = {}
    for alloc, experiment, cap in rows:
        if experiment is None:
            continue  # not a trial: no experiment's max_slots applies
        caps[experiment] = cap
        if alloc.state in PLACED_ALLOCATION:
            held[experiment] = held.get(experiment, 0) + alloc.slots
    capped: dict[str, str] = {}
    pending = sorted((r for r in rows if r[0].state == A.PENDING), key=lambda r: (r[0].requested_at, r[0].id))
    for alloc, experiment, _ in pending:
        cap = caps.get(experiment) if experiment is not None else None
        if cap is None:
            continue
        if held.get(experiment, 0) + alloc.slots > cap:
            capped[alloc.id] = (
                f"experiment {experiment} holds {held.get(experiment, 0)} of its max_slots {cap}; "
                f"this allocation needs {alloc.slots} more"
            )
        else:
            held[experiment] = held.get(experiment, 0) + alloc.slots
    return capped


def build_request(ctx: MasterContext) -> tuple[pb.ScheduleRequest, bool, dict[str, str]]:
    """The scheduler's view of the cluster, whether anything is waiting for a place, and the
    pending allocations held back by their experiment's max_slots (not offered, with why)."""
    request = pb.ScheduleRequest()
    for pool in ctx.settings.pools:
        request.pools.append(
            pb.ResourcePool(
                name=pool.name,
                fitting_policy=FITTING.get(pool.fitting_policy, pb.FITTING_POLICY_BEST),
                preemption_enabled=pool.preemption_enabled,
                default_priority=pool.default_priority,
            )
        )
    # Connected and not shutting down: an agent that is away, or stopping, keeps its running work
    # but gets nothing new.
    placeable = ctx.hub.placeable_ids()
    with ctx.db.read() as s:
        # Every live allocation, whatever its task's kind: one queue, one scheduler. A trial's
        # job is its experiment; any other task is its own job. Columns, not objects: a pass at
        # 10,000 pending allocations reads rows, and each experiment's config once.
        rows = s.execute(
            select(
                models.Allocation.id,
                models.Allocation.state,
                models.Allocation.resource_pool,
                models.Allocation.slots,
                models.Allocation.priority,
                models.Allocation.requested_at,
                func.coalesce(models.Experiment.start_time, models.Task.start_time).label("submitted_at"),
                models.Task.kind,
                models.Task.job_id,
                models.Experiment.id.label("experiment_id"),
                models.Experiment.state.label("experiment_state"),
            )
            .join(models.Task, models.Task.id == models.Allocation.task_id)
            .outerjoin(models.Experiment, models.Experiment.id == models.Task.experiment_id)
            .where(models.Allocation.state.in_(list(LIVE_ALLOCATION)))
        ).all()
        # Placements only where there are any: pending allocations have none to decode.
        placed = select(models.Allocation.id, models.Allocation.placements).where(
            models.Allocation.state.in_(list(PLACED_ALLOCATION))
        )
        placements_of: dict[str, list[dict[str, Any]]] = {row.id: row.placements for row in s.execute(placed)}
        experiment_ids = {row.experiment_id for row in rows if row.experiment_id is not None}
        submitted: dict[datetime, Timestamp] = {}  # a job's time, shared by all its allocations
        max_slots = {
            eid: config_view(config).max_slots
            for eid, config in s.execute(
                select(models.Experiment.id, models.Experiment.config).where(
                    models.Experiment.id.in_(experiment_ids)
                )
            )
        }
        # A canceled or killed experiment's trials are being stopped (in batches, for a big one):
        # none of its pending allocations is placed meanwhile.
        rows = [
            row for row in rows if not (row.state == A.PENDING and row.experiment_state in STOPPED_EXPERIMENT)
        ]
        capped = _over_max_slots(
            [
                (row, row.experiment_id, max_slots.get(row.experiment_id) if row.experiment_id else None)
                for row in rows
            ]
        )
        slot_owner: dict[tuple[str, str], str] = {}
        any_pending = False
        for alloc in rows:
            if alloc.id in capped:
                continue
            experiment_id = alloc.experiment_id
            req = pb.AllocationRequest(
                allocation_id=alloc.id,
                resource_pool=alloc.resource_pool,
                slots_needed=alloc.slots,
                priority=alloc.priority or 0,
                job_submitted_at=submitted.get(alloc.submitted_at)
                or submitted.setdefault(alloc.submitted_at, _ts(alloc.submitted_at)),
                requested_at=_ts(alloc.requested_at),
                job_id=experiment_job_id(experiment_id) if experiment_id is not None else alloc.job_id,
                preemptible=alloc.kind in PREEMPTIBLE_KINDS,
            )
            if alloc.state in PLACED_ALLOCATION:
                for placement in placements_of.get(alloc.id) or []:
                    slot_ids = [str(x) for x in placement.get("slot_ids", [])]
                    req.placements.append(pb.Placement(agent_id=placement["agent_id"], slot_ids=slot_ids))
                    for slot_id in slot_ids:
                        slot_owner[(placement["agent_id"], slot_id)] = alloc.id
            else:
                any_pending = True
            request.requests.append(req)
        agents = list(s.scalars(select(models.Agent).order_by(models.Agent.id)))
        slots = list(s.scalars(select(models.AgentSlot).order_by(models.AgentSlot.agent_id)))
    by_agent: dict[str, list[models.AgentSlot]] = {}
    for slot in slots:
        by_agent.setdefault(slot.agent_id, []).append(slot)
    for agent in agents:
        request.agents.append(
            pb.Agent(
                id=agent.id,
                resource_pool=agent.resource_pool,
                enabled=agent.enabled and agent.id in placeable,
                draining=agent.draining,
                slots=[
                    pb.Slot(
                        id=slot.slot_id,
                        enabled=slot.enabled and not slot.draining,
                        allocation_id=slot_owner.get((agent.id, slot.slot_id), ""),
                    )
                    for slot in by_agent.get(agent.id, [])
                ],
            )
        )
    return request, any_pending, capped


def never_fits(ctx: MasterContext, pool: str, slots: int) -> str | None:
    """Why a request for `slots` could never be placed in `pool`, even with every agent ever
    registered there enabled and idle; None when it could, or when that cannot be known (no agent
    has joined the pool yet, or the scheduler is not reachable). The scheduler's own fitting rules
    decide (a multi-agent fit takes whole agents of one size), so the answer never disagrees with
    what it would do."""
    if slots <= 1:
        return None
    config = next((p for p in ctx.settings.pools if p.name == pool), None)
    if config is not None and config.provider is not None:
        # Agents come and go with the work: the instances the provider may launch decide.
        limits = config.provider.limits
        if not fits_shape(slots, limits.instance_slots):
            return (
                f"the pool's instances have {limits.instance_slots} slot(s) each and {slots} is not a "
                "multiple of that"
            )
        if slots > limits.instance_slots * limits.max_instances:
            return (
                f"the pool has at most {limits.max_instances} instance(s) of {limits.instance_slots} "
                f"slot(s) each"
            )
        return None
    with ctx.db.read() as s:
        agents = list(s.scalars(select(models.Agent).where(models.Agent.resource_pool == pool)))
        slots_of: dict[str, list[str]] = {}
        for slot in s.scalars(
            select(models.AgentSlot).where(models.AgentSlot.agent_id.in_([a.id for a in agents]))
        ):
            slots_of.setdefault(slot.agent_id, []).append(slot.slot_id)
    if not agents:
        return None
    request = pb.ScheduleRequest(
        pools=[
            pb.ResourcePool(
                name=pool,
                fitting_policy=FITTING.get(
                    config.fitting_policy if config else "best", pb.FITTING_POLICY_BEST
                ),
            )
        ],
        agents=[
            pb.Agent(
                id=agent.id,
                resource_pool=pool,
                enabled=True,
                slots=[pb.Slot(id=slot_id, enabled=True) for slot_id in slots_of.get(agent.id, [])],
            )
            for agent in agents
        ],
        requests=[
            pb.AllocationRequest(
                allocation_id="capacity-check",
                resource_pool=pool,
                slots_needed=slots,
                job_submitted_at=_ts(utcnow()),
                requested_at=_ts(utcnow()),
                job_id="capacity-check",
            )
        ],
    )
    try:
        decision = ctx.scheduler.schedule(request)
    except DomainError as exc:
        log.warning("could not ask the scheduler whether a request can ever fit", error=str(exc))
        return None
    if decision.assignments:
        return None
    reason = next((w.reason for w in decision.waiting), "")
    return reason or f"no placement for {slots} slots"


class SchedulingLoop:
    def __init__(self, ctx: MasterContext) -> None:
        self._ctx = ctx
        self.waiting = WaitingInfo()
        self._last_error = ""
        # Passes run when something changed, at most every scheduling interval (Determined: 500
        # ms), and at least every MAX_IDLE_S (agents may have freed slots).
        # What the last pass saw, to skip passes that could only repeat it (_step).
        self._seen: tuple[int, frozenset[str]] | None = None
        self._quiet = False
        self._last_pass = 0.0
        self._loop = BackgroundLoop(
            ctx,
            "scheduling",
            self._step,
            period_s=MAX_IDLE_S,
            wakeup=ctx.scheduler_wakeup,
            min_gap_s=ctx.settings.scheduling_interval_s,
        )

    def start(self) -> None:
        self._loop.start()

    def join(self, timeout: float) -> None:
        self._loop.join(timeout)

    def _step(self) -> None:
        """A pass, unless it could only repeat the last one: that pass placed and preempted
        nothing, nothing asked for a pass since (allocations requested or ended, agents or their
        slots changed, an edit of priority or max_slots all set the wakeup) and the agents that
        take work are the same. Every QUIET_RECHECK_S a pass runs anyway. So a queue of 10,000
        pending trials before a full cluster costs nothing between changes."""
        seen = (self._ctx.scheduler_wakeup.generation, frozenset(self._ctx.hub.placeable_ids()))
        now = time.monotonic()
        if self._quiet and seen == self._seen and now - self._last_pass < QUIET_RECHECK_S:
            return
        self._seen, self._last_pass = seen, now
        self._quiet = self.run_pass()

    def run_pass(self) -> bool:
        """One pass; whether it was quiet (it reached the scheduler, or needed not, and placed and
        preempted nothing)."""
        started = time.perf_counter()
        request, any_pending, capped = build_request(self._ctx)
        held_back = {alloc_id: (reason, 0) for alloc_id, reason in capped.items()}
        if not any_pending:
            if self.waiting.reasons != held_back:
                self.waiting.reasons = held_back
                self._ctx.data_changed()
            return True
        try:
            return self._decide_and_apply(request, held_back)
        finally:
            # Passes with something to place only: an idle pass costs nothing worth a sample.
            self._ctx.telemetry.scheduling_pass.observe(time.perf_counter() - started)

    def _decide_and_apply(self, request: pb.ScheduleRequest, held_back: dict[str, tuple[str, int]]) -> bool:
        try:
            decision = self._ctx.scheduler.schedule(request)
        except DomainError as exc:
            if str(exc) != self._last_error:
                log.warning("scheduler call failed; retrying", error=str(exc))
                self._last_error = str(exc)
            return False
        self._last_error = ""
        reasons = {w.allocation_id: (w.reason, w.queue_position) for w in decision.waiting} | held_back
        if reasons != self.waiting.reasons:
            self.waiting.reasons = reasons
            self._ctx.data_changed()  # queue positions show in the API
        if decision.assignments or decision.preemptions:
            self._apply(decision)
            return False
        return True

    def _apply(self, decision: pb.ScheduleResponse) -> None:
        ctx = self._ctx
        with ctx.unit_of_work() as w:
            used: set[tuple[str, str]] = set()
            for placed in w.session.scalars(
                select(models.Allocation).where(models.Allocation.state.in_(list(PLACED_ALLOCATION)))
            ):
                for placement in placed.placements:
                    used.update((placement["agent_id"], str(s)) for s in placement.get("slot_ids", []))
            connected = ctx.hub.connected_ids()
            for assignment in decision.assignments:
                alloc = w.session.get(models.Allocation, assignment.allocation_id)
                if alloc is None or alloc.state != A.PENDING:
                    continue
                wanted = {(p.agent_id, s) for p in assignment.placements for s in p.slot_ids}
                if wanted & used or any(p.agent_id not in connected for p in assignment.placements):
                    continue  # stale decision; the next pass decides again
                used |= wanted
                allocations.assign(
                    ctx,
                    w,
                    alloc,
                    [{"agent_id": p.agent_id, "slot_ids": list(p.slot_ids)} for p in assignment.placements],
                )
            for preemption in decision.preemptions:
                alloc = w.session.get(models.Allocation, preemption.allocation_id)
                if alloc is not None:
                    allocations.request_preempt(
                        ctx, w, alloc, f"preempted by the scheduler for {preemption.for_allocation_id}"
                    )
