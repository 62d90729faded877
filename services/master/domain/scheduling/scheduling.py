"""The scheduling loop: sends the scheduler the cluster as the master sees it and applies its
decisions (placements, preemptions). Runs when something changed, at most every interval, and
re-checks every decision against the database before applying it: the cluster may have moved on
while the scheduler was thinking."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import bindparam, or_, select

from cairn.scheduler.v1 import scheduler_pb2 as pb
from services.common.logging import get_logger
from services.common.queue_order import QueueKey, effective_priority, queue_key
from services.master.domain.allocations import placement, stops
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.errors import DomainError
from services.master.domain.kernel.fair_shares import GroupDivision, PoolDivision
from services.master.domain.kernel.loops import BackgroundLoop
from services.master.domain.kernel.states import (
    PLACED_ALLOCATION,
)
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.kernel.telemetry import Telemetry
from services.master.domain.scheduling.fair_share_inputs import share_groups
from services.master.domain.scheduling.scheduling_rows import (
    FITTING,
    agent_messages,
    allocation_rows,
    limits_of,
    offered,
    over_max_slots,
    pool_messages,
    request_message,
    ts,
)
from services.master.domain.scheduling.scheduling_view import PLACED_BY_PASS, Pass, SchedulingView
from services.master.domain.scheduling.shapes import fits_shape
from services.master.store import models

log = get_logger(__name__)

# Assignments started per transaction (SchedulingLoop._apply): as many as an agents' batch of
# reports (kernel/batched_units.py), so that a pass waits for the master's lock as seldom as the
# batches do.
APPLY_CHUNK = 256
# Without any wake-up, look again this often (agents may have freed slots).
MAX_IDLE_S = 2.0
# A pass that could only repeat the last one is skipped (SchedulingLoop._step), but never for
# longer than this.
QUIET_RECHECK_S = 10.0
# How a scheduler preemption's reason begins (the start forecast measures these preemptions).
SCHEDULER_PREEMPTION = "preempted by the scheduler"


class WaitingInfo:
    """Why each pending allocation waits and its place in its pool's queue, from the last pass
    (shown by the API). A session's pass gives reasons only (scheduling_view.py): the positions
    are worked out when someone first reads them, not on every pass."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: dict[str, tuple[str, int]] = {}
        self._later: Callable[[], dict[str, tuple[str, int]]] | None = None

    @property
    def reasons(self) -> dict[str, tuple[str, int]]:
        with self._lock:
            if self._later is not None:
                self._reasons, self._later = self._later(), None
            return self._reasons

    @reasons.setter
    def reasons(self, value: dict[str, tuple[str, int]]) -> None:
        with self._lock:
            self._reasons, self._later = value, None

    def set_later(self, compute: Callable[[], dict[str, tuple[str, int]]]) -> None:
        with self._lock:
            self._later = compute


def queue_positions(
    reasons: dict[str, str], requests: dict[str, pb.AllocationRequest], default_priority: dict[str, int]
) -> dict[str, tuple[str, int]]:
    """Each waiting request's reason and its place among the waiting requests of its pool, in the
    scheduler's queue order (services/common/queue_order.py)."""
    by_pool: dict[str, list[tuple[QueueKey, str]]] = {}
    for request_id in reasons:
        r = requests.get(request_id)
        if r is None:
            continue
        priority = effective_priority(r.priority, default_priority.get(r.resource_pool))
        key = queue_key(
            priority, r.job_submitted_at.ToNanoseconds(), r.requested_at.ToNanoseconds(), request_id
        )
        by_pool.setdefault(r.resource_pool, []).append((key, request_id))
    positions: dict[str, tuple[str, int]] = {}
    for queue in by_pool.values():
        queue.sort()
        for position, (_, request_id) in enumerate(queue):
            positions[request_id] = (reasons[request_id], position)
    return positions


def _remember_shares(ctx: MasterContext, decision: pb.ScheduleResponse) -> None:
    """Keep the fair-share pools' divisions the scheduler reported, for the API and /metrics."""
    if not decision.shares:
        return
    now = utcnow()

    def groups(shares: Iterable[pb.GroupShare]) -> tuple[GroupDivision, ...]:
        return tuple(
            GroupDivision(g.key, g.name, g.nominal_slots, g.entitled_slots, g.held_slots, g.wanted_slots)
            for g in shares
        )

    divisions = [
        PoolDivision(s.resource_pool, groups(s.workspaces), groups(s.users), now) for s in decision.shares
    ]
    if ctx.fair_shares.update(divisions):
        ctx.data_changed()  # the API shows them


def build_request(ctx: MasterContext) -> tuple[pb.ScheduleRequest, bool, dict[str, str]]:
    """The scheduler's view of the cluster, whether anything is waiting for a place, and the
    pending allocations held back by their experiment's max_slots (not offered, with why)."""
    placeable = ctx.hub.placeable_ids()
    with ctx.db.read() as s:
        now = utcnow()
        request = pb.ScheduleRequest(pools=pool_messages(ctx, share_groups(s, ctx.settings.pools, now), now))
        rows = [row for row in allocation_rows(s) if offered(row)]
        # Placements only where there are any: pending allocations have none to decode.
        placed = select(models.Allocation.id, models.Allocation.placements).where(
            models.Allocation.state.in_(list(PLACED_ALLOCATION))
        )
        placements_of: dict[str, list[dict[str, Any]]] = {row.id: row.placements for row in s.execute(placed)}
        limits = limits_of(s, {row.experiment_id for row in rows if row.experiment_id is not None})
        capped = over_max_slots(
            [
                (row, row.experiment_id, limits[row.experiment_id].max_slots if row.experiment_id else None)
                for row in rows
            ]
        )
        submitted: dict[datetime, Timestamp] = {}
        slot_owner: dict[tuple[str, str], str] = {}
        any_pending = False
        for row in rows:
            if row.id in capped:
                continue
            weight = limits[row.experiment_id].weight if row.experiment_id else 1.0
            req = request_message(row, placements_of.get(row.id), submitted, weight)
            for placement in req.placements:
                for slot_id in placement.slot_ids:
                    slot_owner[(placement.agent_id, slot_id)] = row.id
            any_pending = any_pending or row.state not in PLACED_ALLOCATION
            request.requests.append(req)
        request.agents.extend(agent_messages(s, placeable, slot_owner))
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
                job_submitted_at=ts(utcnow()),
                requested_at=ts(utcnow()),
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


class _PassClock:
    """A pass's decision time, wall and the scheduling thread's CPU (only passes with something to
    place are counted: an idle pass costs nothing worth a sample)."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.thread_time()

    def decided(self, telemetry: Telemetry) -> None:
        telemetry.scheduling_pass.observe(time.perf_counter() - self.wall)
        telemetry.scheduling_pass_cpu.observe(time.thread_time() - self.cpu)


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
        # Passes over a scheduler session (changes only), unless the scheduler predates them.
        self.view: SchedulingView | None = SchedulingView(ctx)
        # What the session told of waiting requests (reasons only) and the held-back ones.
        self._session_reasons: dict[str, str] = {}
        self._capped: dict[str, str] = {}
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

    def close(self) -> None:
        """At the master's stop, once passes are over: the view's tracker stops listening to the
        database's sessions."""
        if self.view is not None and self.view.tracker is not None:
            self.view.tracker.stop()

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
        if self.view is not None:
            return self._session_pass()
        clock = _PassClock()
        request, any_pending, capped = build_request(self._ctx)
        held_back = {alloc_id: (reason, 0) for alloc_id, reason in capped.items()}
        if not any_pending:
            if self.waiting.reasons != held_back:
                self.waiting.reasons = held_back
                self._ctx.data_changed()
            return True
        return self._decide_and_apply(request, held_back, clock)

    def _session_pass(self) -> bool:
        """A pass over the scheduler's session: the changes since the last pass go out, the
        decision comes back. A snapshot replaces the session whenever either side is in doubt,
        as after any failure of a pass: the changes it took from the tracker, the assignments the
        scheduler kept and those it has yet to be told were not applied would be lost with it."""
        try:
            return self._session_pass_once()
        except BaseException:
            if self.view is not None:
                self.view.resync()
            raise

    def _session_pass_once(self) -> bool:
        assert self.view is not None
        clock = _PassClock()
        with self.view.lock:
            step = self.view.next_pass()
        try:
            answer = self._ctx.scheduler.schedule_changes(step.request)
            if not answer.applied:  # the scheduler restarted or dropped the session
                self.view.resync()
                with self.view.lock:
                    step = self.view.next_pass()
                answer = self._ctx.scheduler.schedule_changes(step.request)
        except NotImplementedError:
            log.warning("the scheduler predates sessions: each pass sends the whole cluster")
            if self.view.tracker is not None:
                self.view.tracker.stop()
            self.view = None
            return self.run_pass()
        except DomainError as exc:
            self.view.resync()  # what the scheduler holds is in doubt
            if str(exc) != self._last_error:
                log.warning("scheduler call failed; retrying", error=str(exc))
                self._last_error = str(exc)
            return False
        self._last_error = ""
        decision = answer.decision
        if answer.assignments_kept and decision.assignments:
            with self.view.lock:
                self.view.kept(decision.assignments)
        self._take_reasons(step, decision)
        _remember_shares(self._ctx, decision)
        if step.any_pending or step.request.snapshot:
            clock.decided(self._ctx.telemetry)
        if decision.assignments or decision.preemptions:
            self._apply(decision)
            return False
        return True

    def _take_reasons(self, step: Pass, decision: pb.ScheduleResponse) -> None:
        """Keep the session's reasons (it sends those that changed) and publish them, with their
        queue positions worked out on first read, from the state then current."""
        view = self.view
        assert view is not None
        with view.lock:
            reasons = self._session_reasons
            before = len(reasons)
            if step.request.snapshot:
                reasons.clear()
            for request_id in step.request.removed_requests:
                reasons.pop(request_id, None)
            for request in step.request.requests:
                if request.placements:
                    reasons.pop(request.allocation_id, None)
            for assignment in decision.assignments:
                reasons.pop(assignment.allocation_id, None)
            for waiting in decision.waiting:
                reasons[waiting.allocation_id] = waiting.reason
            changed = bool(decision.waiting) or step.request.snapshot or len(reasons) != before
            changed = changed or step.capped != self._capped
            self._capped = step.capped
        if not changed:
            return
        defaults = {pool.name: pool.default_priority for pool in self._ctx.settings.pools}

        def positions() -> dict[str, tuple[str, int]]:
            with view.lock:
                waiting = queue_positions(self._session_reasons, view.pending_requests(), defaults)
                return waiting | {k: (v, 0) for k, v in self._capped.items()}

        self.waiting.set_later(positions)
        self._ctx.data_changed()  # reasons and queue positions show in the API

    def _decide_and_apply(
        self, request: pb.ScheduleRequest, held_back: dict[str, tuple[str, int]], clock: _PassClock
    ) -> bool:
        try:
            decision = self._ctx.scheduler.schedule(request)
        except DomainError as exc:
            if str(exc) != self._last_error:
                log.warning("scheduler call failed; retrying", error=str(exc))
                self._last_error = str(exc)
            return False
        self._last_error = ""
        clock.decided(self._ctx.telemetry)
        _remember_shares(self._ctx, decision)
        reasons = {w.allocation_id: (w.reason, w.queue_position) for w in decision.waiting} | held_back
        if reasons != self.waiting.reasons:
            self.waiting.reasons = reasons
            self._ctx.data_changed()  # queue positions show in the API
        if decision.assignments or decision.preemptions:
            self._apply(decision)
            return False
        return True

    def _apply(self, decision: pb.ScheduleResponse) -> None:
        """Start what the decision places, APPLY_CHUNK assignments per transaction (a pass that
        fills a thousand freed slots must not hold the master's lock for seconds while agents'
        reports wait), then ask for the preemptions."""
        ctx = self._ctx
        started = time.perf_counter()
        offsets = self.view.port_offsets() if self.view is not None else None
        assignments = list(decision.assignments)
        for start in range(0, len(assignments), APPLY_CHUNK):
            chunk = assignments[start : start + APPLY_CHUNK]
            with ctx.unit_of_work() as w:
                if offsets is None:
                    offsets = placement.PortOffsets.counted(w)
                if self.view is not None:
                    # The view takes these placements from the pass, not from a read (placed).
                    w.session.info[PLACED_BY_PASS] = {a.allocation_id for a in chunk}
                placed = self._assign(w, chunk, offsets)
                if self.view is not None:
                    # Once committed and still under the master's lock: told after the lock was let
                    # go, each chunk's telling let the agents' batches in between the chunks, and
                    # a burst's 7,500 starts took half as long again (bench/README.md).
                    applied = {allocation_id for allocation_id, _, _ in placed}
                    not_applied = [a.allocation_id for a in chunk if a.allocation_id not in applied]
                    w.later(functools.partial(_tell_view, self.view, placed, not_applied))
        if decision.preemptions:
            with ctx.unit_of_work() as w:
                for preemption in decision.preemptions:
                    if preemption.for_allocation_id and not _still_waits(w, preemption.for_allocation_id):
                        continue  # what it made room for was killed or placed meanwhile
                    alloc = w.session.get(models.Allocation, preemption.allocation_id)
                    if alloc is not None:
                        why = (
                            f"{SCHEDULER_PREEMPTION} for {preemption.for_allocation_id}"
                            if preemption.for_allocation_id
                            else f"{SCHEDULER_PREEMPTION}: its workspace or user is over its quota"
                        )
                        stops.request_preempt(ctx, w, alloc, why)
        ctx.telemetry.scheduling_start.observe(time.perf_counter() - started)

    def _assign(
        self, w: Work, assignments: list[pb.Assignment], offsets: placement.PortOffsets
    ) -> list[tuple[str, int | None, list[dict[str, Any]]]]:
        """Assign each allocation still pending whose slots are still free on a connected agent:
        the cluster may have moved on while the scheduler was deciding. Returns what it placed:
        (allocation id, port block, placements) each."""
        ctx = self._ctx
        # The slots of the agents the decision names that live work holds now: a container per
        # placement, so the agents' containers say it without reading every placement.
        named = {p.agent_id for a in assignments for p in a.placements}
        used: set[tuple[str, str]] = set()
        # Containers of allocations that released their slots early: those slots are free to
        # place on, and a start there waits for the container (allocations.release_early).
        releasing: dict[str, tuple[str, set[str]]] = {}
        for container_id, agent_id, slot_ids, released, container_state in w.session.execute(
            _PLACED_CONTAINERS_ON, {"agent_ids": list(named)}
        ):
            if not released:
                used.update((agent_id, str(s)) for s in slot_ids)
            elif container_state != A.TERMINATED:
                releasing[container_id] = (agent_id, {str(s) for s in slot_ids})
        connected = ctx.hub.connected_ids()
        closed_agents, closed_slots = _closed_to_new_work(w, named)
        # Every allocation the decision names, in one read before anything changes (one read each
        # in the loop flushed the last one's changes first: a round trip more per start).
        allocs = {
            alloc.id: alloc
            for alloc in w.session.scalars(
                _ALLOCATIONS_BY_ID, {"ids": [a.allocation_id for a in assignments]}
            )
        }
        placement.preload(w, allocs.values(), named)
        placed: list[tuple[str, int | None, list[dict[str, Any]]]] = []
        for assignment in assignments:
            alloc = allocs.get(assignment.allocation_id)
            if alloc is None or alloc.state != A.PENDING:
                continue
            wanted = {(p.agent_id, s) for p in assignment.placements for s in p.slot_ids}
            if (
                wanted & used
                or wanted & closed_slots
                or any(
                    p.agent_id not in connected or p.agent_id in closed_agents for p in assignment.placements
                )
            ):
                continue  # stale decision; the next pass decides again
            used |= wanted
            where: list[dict[str, Any]] = [
                {"agent_id": p.agent_id, "slot_ids": list(p.slot_ids)} for p in assignment.placements
            ]
            placement.assign(ctx, w, alloc, where, offsets, releasing)
            placed.append((alloc.id, alloc.port_offset, where))
        return placed


# The reads of applying a decision, built once: a pass runs them every time it places anything,
# and building a statement anew cost about as much as running it at a small cluster.
_PLACED_CONTAINERS_ON = (
    select(
        models.Container.id,
        models.Container.agent_id,
        models.Container.slot_ids,
        models.Allocation.releasing,
        models.Container.state,
    )
    .join(models.Allocation, models.Allocation.id == models.Container.allocation_id)
    .where(
        models.Container.agent_id.in_(bindparam("agent_ids", expanding=True)),
        models.Allocation.state.in_(list(PLACED_ALLOCATION)),
    )
)
_ALLOCATIONS_BY_ID = select(models.Allocation).where(
    models.Allocation.id.in_(bindparam("ids", expanding=True))
)
_CLOSED_AGENTS = select(models.Agent.id).where(
    models.Agent.id.in_(bindparam("agent_ids", expanding=True)),
    or_(models.Agent.enabled.is_(False), models.Agent.draining.is_(True)),
)
_CLOSED_SLOTS = select(models.AgentSlot.agent_id, models.AgentSlot.slot_id).where(
    models.AgentSlot.agent_id.in_(bindparam("agent_ids", expanding=True)),
    or_(models.AgentSlot.enabled.is_(False), models.AgentSlot.draining.is_(True)),
)


def _tell_view(
    view: SchedulingView, placed: list[tuple[str, int | None, list[dict[str, Any]]]], not_applied: list[str]
) -> None:
    with view.lock:
        try:
            view.placed(placed, not_applied)
        except BaseException:
            view.resync()  # an effect's failure is only logged: what the view holds is in doubt
            raise


def _closed_to_new_work(w: Work, agent_ids: set[str]) -> tuple[set[str], set[tuple[str, str]]]:
    """Of `agent_ids`, the agents and the slots disabled or draining now: a user may have closed
    them while the scheduler decided on what it had read before."""
    if not agent_ids:
        return set(), set()
    ids = {"agent_ids": list(agent_ids)}
    agents = set(w.session.scalars(_CLOSED_AGENTS, ids))
    slots = {(agent_id, str(slot_id)) for agent_id, slot_id in w.session.execute(_CLOSED_SLOTS, ids)}
    return agents, slots


def _still_waits(w: Work, allocation_id: str) -> bool:
    alloc = w.session.get(models.Allocation, allocation_id)
    return alloc is not None and alloc.state == A.PENDING
