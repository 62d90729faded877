"""When each waiting request is expected to start: the scheduler's own decisions (schedule.py)
played forward over the running work's expected remaining time.

From the state now, decide; what starts takes its slots and runs for its expected time; what is
preempted goes back to the queue with what it had left, and the scheduler decides again at the same
moment (the room made is taken); otherwise time moves to the next expected end, which frees its
slots (or to the moment running work grows past a fair-share pool's minimum run, when it may be
reclaimed), and the scheduler decides again. A request's forecast is the first moment it starts,
with the allocation whose end (or preemption) let it (none: it starts with what is free now). Work
with no known end never ends within the forecast, so what only it holds back gets no forecast. The
play stops at the horizon, or after `max_steps` decisions, or once every job has a start and the
play has passed `job_horizon_s`.

Because it is the scheduler's own decision function at every step, the forecast knows what the
scheduler knows: priorities, fair shares and quotas, gangs, fitting, preemption. It does not know
what will be submitted later, nor how long work really runs: its error is measured, not assumed
(bench/fairness.py; bench/README.md splits it by cause).

The play keeps the scheduler's clock: with `now_ns` (when the state was taken), what the play
places is placed at now + its moment, and a fair-share pool's minimum run before reclaim
(`protect_started_after`) moves with the play, so work it places, and work that is young now, may
be reclaimed once old enough, as the real passes will. With a pool's usage half-life, each
workspace's and user's recent usage grows with what it holds in the play and decays as the master
decays it, so shares drift as they will (and the play decides again every RECHECK_S while they
do). A request the play preempts keeps its slots for its pool's `release_s` (its code checkpoints
and exits; what it made room for starts then), and starts again with what it had left plus its
`restart_seconds` (its start-up again).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from services.scheduler.domain.errors import InvalidScheduleInput
from services.scheduler.domain.model import (
    Agent,
    AllocationRequest,
    ClusterState,
    Placement,
    PoolShares,
    ResourcePool,
    SchedulerType,
    ShareGroup,
    Slot,
)
from services.scheduler.domain.quotas import user_of, workspace_of
from services.scheduler.domain.schedule import schedule
from services.scheduler.domain.validation import validate_state

MAX_HORIZON_S = 30 * 24 * 3600.0
MAX_STEPS = 10_000
_NS = 1_000_000_000
# While usage moves shares, the play decides again at least this often (the master's refresh of
# fair share's usage and its quiet re-pass are 10 s), or this part of the time ahead, if longer.
RECHECK_S = 10.0
RECHECK_PART = 0.05


@dataclass(frozen=True)
class Forecast:
    # Waiting request -> (seconds from now it starts, the allocation whose end let it start).
    starts: dict[str, tuple[float, str]]
    # The play stopped at its step bound before its horizon.
    truncated: bool


@dataclass(frozen=True)
class PlayClock:
    """What moves with the play besides slots: the scheduler's clock and fair share's usage."""

    # When the state was taken (nanoseconds since the epoch); 0: unknown (the play's placements
    # are then timed after every real one, and the pools' protection stays where it is).
    now_ns: int = 0
    # A fair-share pool's usage half-life in seconds, by pool name; absent: usage stays as it is.
    usage_half_life_s: Mapping[str, float] = field(default_factory=dict)
    # How long a preempted allocation of a pool keeps its slots (its code checkpoints and exits,
    # the next pass places what it made room for), by pool name; absent: it gives them back at once.
    release_s: Mapping[str, float] = field(default_factory=dict)


class _Usage:
    """A fair-share pool's groups' recent usage as the play moves it: decayed by the half-life,
    grown by the slots each group holds (exactly integrated between two moments, as the master's
    decayed_slot_seconds does)."""

    def __init__(self, pool: ResourcePool, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self.workspaces = {g.key: g for g in pool.workspaces}
        self.users = {g.key: g for g in pool.users}

    def advance(self, dt: float, held_ws: Mapping[str, int], held_users: Mapping[str, int]) -> None:
        if dt <= 0:
            return
        keep = math.pow(2.0, -dt / self.half_life_s)
        grown = self.half_life_s / math.log(2) * (1.0 - keep)
        for groups, held in ((self.workspaces, held_ws), (self.users, held_users)):
            for key in set(groups) | set(held):
                group = groups.get(key) or ShareGroup(key=key)
                used = group.recent_slot_seconds * keep + held.get(key, 0) * grown
                groups[key] = replace(group, recent_slot_seconds=used)

    def pool(self, pool: ResourcePool) -> ResourcePool:
        return replace(
            pool,
            workspaces=tuple(self.workspaces[k] for k in sorted(self.workspaces)),
            users=tuple(self.users[k] for k in sorted(self.users)),
        )


class _Play:
    """The cluster as the play moves it: agents' slots and requests, by id; the clock."""

    def __init__(self, state: ClusterState, clock: PlayClock) -> None:
        self.pools = {p.name: p for p in state.pools}
        self.agents: dict[str, Agent] = {a.id: a for a in state.agents}
        self.requests: dict[str, AllocationRequest] = {r.allocation_id: r for r in state.requests}
        self.moves_clock = clock.now_ns > 0
        # A placement's time for fair share's oldest-first reclaim: now, or after every real one.
        latest = max((r.started_at_ns for r in state.requests), default=0) + 1
        self.base_ns = clock.now_ns if self.moves_clock else latest
        self.at_s = 0.0
        self.usage = {
            pool.name: _Usage(pool, clock.usage_half_life_s[pool.name])
            for pool in state.pools
            if pool.scheduler_type is SchedulerType.FAIR_SHARE
            and clock.usage_half_life_s.get(pool.name, 0.0) > 0
            and math.isfinite(clock.usage_half_life_s[pool.name])
        }

    def _pool(self, pool: ResourcePool) -> ResourcePool:
        usage = self.usage.get(pool.name)
        if usage is not None:
            pool = usage.pool(pool)
        if self.moves_clock and pool.protect_started_after_ns > 0:
            pool = replace(
                pool, protect_started_after_ns=pool.protect_started_after_ns + int(self.at_s * _NS)
            )
        return pool

    def state(self) -> ClusterState:
        pools = tuple(self._pool(p) for p in self.pools.values())
        return ClusterState(pools, tuple(self.agents.values()), tuple(self.requests.values()))

    def reclaim_targets(self) -> list[AllocationRequest]:
        """Running preemptible work of fair-share pools that something waiting could reclaim
        (another workspace's, or another user's of its own workspace, in its pool)."""
        waiting: dict[str, set[tuple[str, str]]] = defaultdict(set)
        for r in self.requests.values():
            pool = self.pools.get(r.resource_pool)
            if not r.running and pool is not None and pool.scheduler_type is SchedulerType.FAIR_SHARE:
                waiting[r.resource_pool].add((r.workspace, r.user))
        return [
            r
            for r in self.requests.values()
            if r.running
            and r.preemptible
            and any(ws != r.workspace or user != r.user for ws, user in waiting.get(r.resource_pool, ()))
        ]

    @staticmethod
    def reclaimable_now(
        targets: list[AllocationRequest], shares: tuple[PoolShares, ...]
    ) -> list[AllocationRequest]:
        """Those of `targets` a reclaim would take as the last decision divided the pools: work of
        a workspace (or user) over its share while another of the pool (or of its workspace) waits
        below its own."""
        over: set[tuple[str, str]] = set()  # (pool, group key)
        under_ws: set[str] = set()  # pools where a workspace waits below its share
        under_user: set[tuple[str, str]] = set()  # (pool, workspace key) where a user does
        for pool in shares:
            for g in pool.workspaces:
                if g.held_slots > g.entitled_slots:
                    over.add((pool.resource_pool, g.key))
                elif g.held_slots < g.entitled_slots and g.wanted_slots > g.held_slots:
                    under_ws.add(pool.resource_pool)
            for g in pool.users:
                if g.held_slots > g.entitled_slots:
                    over.add((pool.resource_pool, g.key))
                elif g.held_slots < g.entitled_slots and g.wanted_slots > g.held_slots:
                    under_user.add((pool.resource_pool, g.key.rsplit("/", 1)[0]))
        return [
            r
            for r in targets
            if (r.resource_pool in under_ws and (r.resource_pool, workspace_of(r)) in over)
            or ((r.resource_pool, workspace_of(r)) in under_user and (r.resource_pool, user_of(r)) in over)
        ]

    def next_unprotected(self, targets: list[AllocationRequest]) -> float:
        """The next moment (seconds into the play) one of `targets` grows old enough to be
        reclaimed (past its pool's minimum run); inf: none, or the clock does not move."""
        if not self.moves_clock:
            return math.inf
        soonest = math.inf
        for r in targets:
            protect = self.pools[r.resource_pool].protect_started_after_ns
            if protect <= 0:
                continue
            # Protected while started_at > protect + moment: reclaimable from this moment on.
            at = (r.started_at_ns - protect) / _NS
            if at >= self.at_s:
                soonest = min(soonest, at + 1e-6)
        return soonest

    def next_recheck(self, targets: list[AllocationRequest], last_s: float) -> float:
        """While shares drift with usage and something waits that drift could let reclaim one of
        `targets`, the next moment to decide again even if nothing ends: the master refreshes
        usage and passes every RECHECK_S; far ahead, less often (a share drifts slowly). inf: no
        such moment."""
        if any(r.resource_pool in self.usage for r in targets):
            return last_s + max(RECHECK_S, RECHECK_PART * last_s)
        return math.inf

    def advance(self, to_s: float) -> None:
        """Move the clock to `to_s`: each group's usage grows with what it held meanwhile."""
        dt = to_s - self.at_s
        for name, usage in self.usage.items():
            held_ws: dict[str, int] = defaultdict(int)
            held_users: dict[str, int] = defaultdict(int)
            for r in self.requests.values():
                if r.running and r.resource_pool == name and r.slots_needed > 0:
                    if r.workspace:
                        held_ws[r.workspace] += r.slots_needed
                    if r.user:
                        held_users[r.user] += r.slots_needed
            usage.advance(dt, held_ws, held_users)
        self.at_s = to_s

    def _mark(self, placements: tuple[Placement, ...], holder: str) -> None:
        for placement in placements:
            agent = self.agents.get(placement.agent_id)
            if agent is None:
                continue
            chosen = set(placement.slot_ids)
            slots = tuple(
                Slot(s.id, s.enabled, holder if s.id in chosen else s.allocation_id) for s in agent.slots
            )
            self.agents[agent.id] = replace(agent, slots=slots)

    def _clear(self, allocation_id: str) -> None:
        """Free the slots the request holds: only the agents its placements name are looked at."""
        for agent_id in dict.fromkeys(p.agent_id for p in self.requests[allocation_id].placements):
            agent = self.agents.get(agent_id)
            if agent is not None and any(s.allocation_id == allocation_id for s in agent.slots):
                slots = tuple(
                    Slot(s.id, s.enabled, "" if s.allocation_id == allocation_id else s.allocation_id)
                    for s in agent.slots
                )
                self.agents[agent_id] = replace(agent, slots=slots)

    def start(self, allocation_id: str, placements: tuple[Placement, ...], at_s: float) -> None:
        request = self.requests[allocation_id]
        started = self.base_ns + int(at_s * _NS)
        self.requests[allocation_id] = replace(request, placements=placements, started_at_ns=started)
        self._mark(placements, allocation_id)

    def requeue(self, allocation_id: str) -> None:
        request = self.requests[allocation_id]
        self._clear(allocation_id)
        self.requests[allocation_id] = replace(request, placements=())

    def end(self, allocation_id: str) -> None:
        self._clear(allocation_id)
        del self.requests[allocation_id]


def _seconds(value: float | None) -> float:
    return value if value is not None and value >= 0 and math.isfinite(value) else math.inf


def _finite(value: float | None) -> float:
    return value if value is not None and math.isfinite(value) else 0.0


def predict_starts(
    state: ClusterState,
    expected_seconds: Mapping[str, float],
    horizon_s: float,
    max_steps: int,
    clock: PlayClock | None = None,
    restart_seconds: Mapping[str, float] | None = None,
    job_horizon_s: float | None = None,
) -> Forecast:
    """Forecast the starts of `state`'s waiting requests (module docstring). `expected_seconds`:
    for a running request what is left of its run, for a waiting one its whole run;
    `restart_seconds`: what a request's run costs beyond that if it is preempted and started again;
    `job_horizon_s`: once every job with waiting requests has a forecast start, play no further
    than this (a job's first start is always sought up to the horizon; its later ones only this
    far)."""
    if not 0 < horizon_s <= MAX_HORIZON_S or not math.isfinite(horizon_s):
        raise InvalidScheduleInput("horizon_seconds", f"must be above 0 and at most {MAX_HORIZON_S:g}")
    if not 0 < max_steps <= MAX_STEPS:
        raise InvalidScheduleInput("max_steps", f"must be 1 to {MAX_STEPS}")
    if job_horizon_s is not None and not (job_horizon_s > 0 and math.isfinite(job_horizon_s)):
        raise InvalidScheduleInput("job_horizon_seconds", "must be above 0 when given")
    clock = clock or PlayClock()
    if clock.now_ns < 0:
        raise InvalidScheduleInput("now", "must not be before the epoch")
    for field_name, values in (
        ("usage_half_life_seconds", clock.usage_half_life_s),
        ("release_seconds", clock.release_s),
    ):
        for name, value in values.items():
            if not (value >= 0 and math.isfinite(value)):
                raise InvalidScheduleInput(f"{field_name}[{name!r}]", "must be a finite number >= 0")
    validate_state(state)
    restart = restart_seconds or {}
    play = _Play(state, clock)
    waiting = [r.allocation_id for r in state.requests if not r.running]
    forecast_for = set(waiting)
    job_of = {r.allocation_id: r.job_key for r in state.requests if not r.running}
    jobs_waiting = len(set(job_of.values()))
    jobs_started: set[str] = set()
    # When each running request ends; what a preempted one has left when it starts again.
    ends = {
        r.allocation_id: _seconds(expected_seconds.get(r.allocation_id)) for r in state.requests if r.running
    }
    left = {rid: _seconds(expected_seconds.get(rid)) for rid in waiting}
    # Preempted requests that keep their slots until they release them (PlayClock.release_s).
    releasing: set[str] = set()
    starts: dict[str, tuple[float, str]] = {}
    now, freed_by, steps = 0.0, "", 0
    truncated = False
    while len(starts) < len(waiting):
        if steps >= max_steps:
            truncated = True
            break
        steps += 1
        decision = schedule(play.state())
        for assignment in decision.assignments:
            rid = assignment.allocation_id
            play.start(rid, assignment.placements, now)
            ends[rid] = now + left.pop(rid, math.inf)
            if rid in forecast_for:
                starts.setdefault(rid, (now, freed_by))
                jobs_started.add(job_of[rid])
        freed_now = False
        for preemption in decision.preemptions:
            rid = preemption.allocation_id
            if rid in releasing or rid not in play.requests or not play.requests[rid].running:
                continue
            left[rid] = max(0.0, ends.pop(rid, math.inf) - now) + max(0.0, _finite(restart.get(rid)))
            release = clock.release_s.get(play.requests[rid].resource_pool, 0.0)
            if release > 0:
                # It holds its slots while it checkpoints and exits; then it is queued again.
                releasing.add(rid)
                ends[rid] = now + release
                continue
            play.requeue(rid)
            freed_by = rid  # what starts in the room made waited for this one's slots
            freed_now = True
        if freed_now:
            continue  # the same moment, decided again: the room made is taken
        # The next moment: the next end, work growing past its minimum run (it may be reclaimed
        # then), or a recheck of shares drifting with usage. Ends are not merged into coarser
        # moments: a gang starts where several slots free at once, and one-slot work takes slots
        # freed one at a time, as it does (merging ends 0.25 s apart forecast four-slot trials
        # 40 s early in bench/fairness.py).
        targets = play.reclaim_targets()
        now = min(
            min(ends.values(), default=math.inf),
            play.next_unprotected(play.reclaimable_now(targets, decision.shares)),
            play.next_recheck(targets, now),
        )
        if now > horizon_s:
            break
        if job_horizon_s is not None and now > job_horizon_s and len(jobs_started) == jobs_waiting:
            break
        finished = sorted(rid for rid, end in ends.items() if end <= now)
        play.advance(now)
        for rid in finished:
            del ends[rid]
            if rid in releasing:
                releasing.discard(rid)
                play.requeue(rid)
            else:
                play.end(rid)
        freed_by = finished[0] if finished else ""
    return Forecast({rid: starts[rid] for rid in waiting if rid in starts}, truncated)
