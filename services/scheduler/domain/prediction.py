"""When each waiting request is expected to start: the scheduler's own decisions (schedule.py)
played forward over the running work's expected remaining time.

From the state now, decide; what starts takes its slots and runs for its expected time; what is
preempted goes back to the queue with what it had left; when nothing more changes at this moment,
time moves to the next expected end, which frees its slots, and the scheduler decides again. A
request's forecast is the first moment it starts, with the allocation whose end let it (none: it
starts with what is free now). Work with no known end never ends within the forecast, so what only
it holds back gets no forecast. The play stops at the horizon, or after `max_steps` decisions.

Because it is the scheduler's own decision function at every step, the forecast knows what the
scheduler knows: priorities, fair shares and quotas, gangs, fitting, preemption. It does not know
what will be submitted later, nor how long work really runs: its error is measured, not assumed
(bench/fairness.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from services.scheduler.domain.errors import InvalidScheduleInput
from services.scheduler.domain.model import Agent, AllocationRequest, ClusterState, Placement, Slot
from services.scheduler.domain.schedule import schedule
from services.scheduler.domain.validation import validate_state

MAX_HORIZON_S = 30 * 24 * 3600.0
MAX_STEPS = 10_000
_NS = 1_000_000_000


@dataclass(frozen=True)
class Forecast:
    # Waiting request -> (seconds from now it starts, the allocation whose end let it start).
    starts: dict[str, tuple[float, str]]
    # The play stopped at its step bound before its horizon.
    truncated: bool


class _Play:
    """The cluster as the play moves it: agents' slots and requests, by id."""

    def __init__(self, state: ClusterState) -> None:
        self.pools = state.pools
        self.agents: dict[str, Agent] = {a.id: a for a in state.agents}
        self.requests: dict[str, AllocationRequest] = {r.allocation_id: r for r in state.requests}
        # A placement's time for fair share's oldest-first reclaim: after every real one.
        self.base_ns = max((r.started_at_ns for r in state.requests), default=0) + 1

    def state(self) -> ClusterState:
        return ClusterState(self.pools, tuple(self.agents.values()), tuple(self.requests.values()))

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


def predict_starts(
    state: ClusterState, expected_seconds: Mapping[str, float], horizon_s: float, max_steps: int
) -> Forecast:
    """Forecast the starts of `state`'s waiting requests (module docstring). `expected_seconds`:
    for a running request what is left of its run, for a waiting one its whole run."""
    if not 0 < horizon_s <= MAX_HORIZON_S or not math.isfinite(horizon_s):
        raise InvalidScheduleInput("horizon_seconds", f"must be above 0 and at most {MAX_HORIZON_S:g}")
    if not 0 < max_steps <= MAX_STEPS:
        raise InvalidScheduleInput("max_steps", f"must be 1 to {MAX_STEPS}")
    validate_state(state)
    play = _Play(state)
    waiting = [r.allocation_id for r in state.requests if not r.running]
    forecast_for = set(waiting)
    # When each running request ends; what a preempted one has left when it starts again.
    ends = {
        r.allocation_id: _seconds(expected_seconds.get(r.allocation_id)) for r in state.requests if r.running
    }
    left = {rid: _seconds(expected_seconds.get(rid)) for rid in waiting}
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
        for preemption in decision.preemptions:
            rid = preemption.allocation_id
            if rid in play.requests and play.requests[rid].running:
                left[rid] = max(0.0, ends.pop(rid, math.inf) - now)
                play.requeue(rid)
        if decision.assignments or decision.preemptions:
            continue  # the same moment, decided again with what changed
        upcoming = min(ends.values(), default=math.inf)
        if upcoming > horizon_s:
            break
        now = upcoming
        finished = sorted(rid for rid, end in ends.items() if end <= now)
        for rid in finished:
            del ends[rid]
            play.end(rid)
        freed_by = finished[0] if finished else ""
    return Forecast({rid: starts[rid] for rid in waiting if rid in starts}, truncated)
