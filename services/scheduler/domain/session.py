"""A scheduling session: the cluster state kept between passes and changed by what the master
sends, so that a pass costs what changed, not the length of the queue.

`schedule(state)` stays the definition: a session's decision is always the one `schedule` would
give for the session's state (tests/unit/scheduler/test_scheduler_session.py checks it over random
change sequences, test_scheduler_fair_share_pass.py over a fair-share pool's). What a session adds
is bookkeeping that makes the same decision cheap:
- each pool's capacity is kept and changed agent by agent, and copies of it are copy-on-write;
- each pool's pending requests are kept in queue order per priority level and shape, so a pass
  takes them as they are, and stops looking at a level once no shape of it fits (priority_pass);
- a fair-share pool's slotted requests are kept as its pass reads them (fair_queue.py: filed by
  workspace, user, job and shape; what each group wants and holds; reclaimable work by group and
  agent, oldest first; each level's last division), and its pass stops taking a user's requests
  one by one once none of them could change anything (fair_share.py), so a pass after one change
  looks at what the change concerns;
- a pool nothing touched keeps its last outcome;
- the answer lists only the waiting requests whose reason changed since the previous answer (the
  requests a pass labelled together, a priority level's or a fair-share user's, are looked at one
  by one only where their label or their membership changed).

A session is the scheduler's cache of the master's truth, never a second truth: the master can
rebuild it at any time with a snapshot, and does whenever a call fails or the scheduler answers
that it holds no session at the master's version (it restarted, or the session was dropped).
A change that contradicts the state ends the session (the caller gets the error, then sends a
snapshot), so no decision is ever taken from state that disagrees with itself.

Where the master asks (keep_assignments), the session takes its own answer's assignments as placed
(`keep`): a pass that placed thousands then needs none of them sent back, only those the master
could not apply (it sends them again as they stand). Until then such a request holds its slots
in the session, which delays other work by at most a pass and never places two on one slot.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from services.scheduler.domain import reasons
from services.scheduler.domain.capacity import AgentCapacity, PoolCapacity, slot_order_key, topology_of
from services.scheduler.domain.errors import InvalidScheduleInput
from services.scheduler.domain.fair_queue import FairQueue, GroupTail, Place, place_of
from services.scheduler.domain.fair_share import run_fair_share_pass
from services.scheduler.domain.fitting import Fit
from services.scheduler.domain.model import (
    Agent,
    AllocationRequest,
    Assignment,
    ClusterState,
    PoolShares,
    Preemption,
    ResourcePool,
    SchedulerType,
    Waiting,
)
from services.scheduler.domain.ordering import QueueKey, effective_priority, queue_key
from services.scheduler.domain.priority_pass import Level, Shape, Tail, run_priority_pass, shape_of
from services.scheduler.domain.quota_pass import run_priority_quota_pass
from services.scheduler.domain.quotas import Quotas
from services.scheduler.domain.reasons import PoolFacts
from services.scheduler.domain.validation import check_weight, validate_placements, validate_state

# Where a pending request sits in its pool: (zero-slot?, priority, shape).
QueuePlace = tuple[bool, int, Shape]


@dataclass(frozen=True)
class Changes:
    """What changed since the session's last version. `pools` is the whole list, or None when
    unchanged; agents and requests come whole (added or changed) or as removed ids."""

    pools: tuple[ResourcePool, ...] | None = None
    agents: tuple[Agent, ...] = ()
    removed_agents: tuple[str, ...] = ()
    requests: tuple[AllocationRequest, ...] = ()
    removed_requests: tuple[str, ...] = ()


@dataclass
class Work:
    """What the last `decide` looked at one by one: what its cost follows (tests count it)."""

    # Requests a fair-share pass took one by one.
    examined: int = 0
    # Waiting reasons compared with what the caller was told.
    reasons_compared: int = 0


@dataclass(frozen=True)
class SessionAnswer:
    assignments: tuple[Assignment, ...]
    preemptions: tuple[Preemption, ...]
    # Waiting requests whose reason changed since the previous answer (every one after a snapshot).
    # Queue positions are the reader's to compute: they move for every request behind one that
    # starts, and sending them would make every answer as long as the queue.
    waiting: tuple[Waiting, ...]
    # The fair-share pools decided again in this pass (the others' division is unchanged).
    shares: tuple[PoolShares, ...] = ()


def _agent_shape(agent: Agent) -> tuple[object, ...]:
    """What an agent offers, apart from who uses its slots: a change here changes the pool's facts
    (what it could offer at best), a change of occupancy only its capacity."""
    return (
        agent.resource_pool,
        agent.enabled,
        agent.draining,
        tuple((s.id, s.enabled) for s in agent.slots),
    )


@dataclass
class _Outcome:
    started: list[tuple[AllocationRequest, Fit]] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    shares: PoolShares | None = None


@dataclass
class _PoolState:
    name: str
    config: ResourcePool | None = None
    agents: set[str] = field(default_factory=set)
    base: PoolCapacity = field(default_factory=lambda: PoolCapacity({}))
    facts: PoolFacts | None = None
    idle: PoolCapacity | None = None
    # Which request shapes fit in the idle pool (reset with it).
    idle_fits: dict[Shape, bool] = field(default_factory=dict)
    # zero-slot? -> priority -> shape -> [(queue key, request)] in queue order.
    pending: dict[bool, dict[int, Level]] = field(default_factory=lambda: {False: {}, True: {}})
    running: dict[bool, dict[str, AllocationRequest]] = field(default_factory=lambda: {False: {}, True: {}})
    dirty: bool = True
    outcome: _Outcome = field(default_factory=_Outcome)
    # The tails of the previous pass: place -> (first queue key, reason).
    tails: dict[QueuePlace, tuple[QueueKey, str]] = field(default_factory=dict)
    # A fair-share pool's slotted requests as its pass reads them (None in a priority pool).
    fair: FairQueue | None = None
    # The group tails of the previous fair-share pass: place -> (reason, requests not in it).
    group_tails: dict[Place, tuple[str, frozenset[str]]] = field(default_factory=dict)

    @property
    def pool(self) -> ResourcePool:
        # A pool the master does not list still orders its queue, by Determined's default priority.
        return self.config if self.config is not None else ResourcePool(name=self.name)

    def has_requests(self) -> bool:
        return any(self.pending[k] or self.running[k] for k in (False, True))


class SchedulingSession:
    def __init__(self, state: ClusterState) -> None:
        """A session holding `state` (validated as a whole, as `schedule` validates it)."""
        validate_state(state)
        self._pools: dict[str, _PoolState] = {}
        self._agents: dict[str, Agent] = {}
        self._requests: dict[str, AllocationRequest] = {}
        # The pending requests' places in their pool's queue (to find them again on removal).
        self._places: dict[str, tuple[str, QueuePlace, QueueKey]] = {}
        # (agent, slot) -> the running request whose placement claims it.
        self._claims: dict[tuple[str, str], str] = {}
        # agent -> the running requests placed on it.
        self._on_agent: dict[str, set[str]] = {}
        self._dirty_agents: set[str] = set()
        # What the caller was told last: waiting request -> reason.
        self._reported: dict[str, str] = {}
        # Pending requests added or changed since the last answer.
        self._touched: set[str] = set()
        self.work = Work()
        self._set_pools(state.pools)
        for agent in state.agents:
            self._put_agent(agent)
        for request in state.requests:
            self._put_request(request)

    @property
    def requests(self) -> Mapping[str, AllocationRequest]:
        """The requests the session holds, by allocation id (not to be changed)."""
        return self._requests

    # -- changes -------------------------------------------------------------------------------

    def apply(self, changes: Changes) -> None:
        """Apply `changes`. InvalidScheduleInput names the first contradiction; the session is then
        unusable (the caller drops it and starts again from a snapshot)."""
        if changes.pools is not None:
            _check_pools(changes.pools)
            self._set_pools(changes.pools)
        for i, agent in enumerate(changes.agents):
            _check_agent(f"agents[{i}]", agent)
            self._put_agent(agent)
        changed_ids = {r.allocation_id for r in changes.requests}
        for i, request_id in enumerate(changes.removed_requests):
            if request_id in changed_ids:
                raise InvalidScheduleInput(f"removed_requests[{i}]", f"'{request_id}' is also in requests")
        # Removals first: a request placed now may use the slots of one that ended.
        for request_id in changes.removed_requests:
            self._drop_request(request_id)
        for i, request in enumerate(changes.requests):
            _check_request(f"requests[{i}]", request)
            self._drop_request(request.allocation_id)
            self._check_placements(f"requests[{i}]", request)
            self._put_request(request)
        for i, agent_id in enumerate(changes.removed_agents):
            held = self._on_agent.get(agent_id)
            if held:
                raise InvalidScheduleInput(
                    f"removed_agents[{i}]", f"agent '{agent_id}' still runs '{sorted(held)[0]}'"
                )
            self._drop_agent(agent_id)
        # Agents' slots may have changed under placements that were valid before.
        for agent_id in changes.removed_agents:
            self._on_agent.pop(agent_id, None)
        for i, agent in enumerate(changes.agents):
            known = {s.id for s in agent.slots}
            for request_id in sorted(self._on_agent.get(agent.id, ())):
                for placement in self._requests[request_id].placements:
                    gone = [
                        s for s in placement.slot_ids if placement.agent_id == agent.id and s not in known
                    ]
                    if gone:
                        raise InvalidScheduleInput(
                            f"agents[{i}].slots", f"slot '{gone[0]}' is gone but '{request_id}' runs there"
                        )

    def keep(self, assignments: Iterable[Assignment]) -> None:
        """Take the last answer's `assignments` as placed (the master's keep_assignments): each
        request is held running where it was assigned, with started_at its requested_at, as the
        master would send it once placed and not yet running. The master sends again, as it stands,
        any request whose assignment it did not apply; until then the session holds it placed,
        which at worst keeps its slots from the next pass's decisions."""
        for assignment in assignments:
            request = self._requests.get(assignment.allocation_id)
            if request is None or request.running:
                continue  # not from this session's last answer: nothing to keep
            self._drop_request(request.allocation_id)
            self._put_request(
                replace(request, placements=assignment.placements, started_at_ns=request.requested_at_ns)
            )

    def _set_pools(self, pools: Iterable[ResourcePool]) -> None:
        configs = {pool.name: pool for pool in pools}
        for name in set(configs) | {n for n, p in self._pools.items() if p.config is not None}:
            state = self._pool(name)
            config = configs.get(name)
            if config == state.config:
                continue
            default_priority = state.pool.default_priority
            state.config = config
            state.dirty = True
            # A fair-share pool's settings change on most passes (recent usage, the minimum run
            # before reclaim): only the default priority orders the queue.
            if state.pool.default_priority != default_priority:
                state.tails = {}
                state.fair = None
                pending = [r for r in self._requests.values() if not r.running and r.resource_pool == name]
                for request in pending:
                    self._unfile(request.allocation_id)
                for request in pending:
                    self._file(request)
                    self._touched.add(request.allocation_id)
            if config is None or config.scheduler_type is not SchedulerType.FAIR_SHARE:
                state.fair = None
            elif state.fair is None:
                slotted = [*state.running[False].values()]
                slotted += [
                    r for level in state.pending[False].values() for q in level.values() for _, r in q
                ]
                state.fair = FairQueue(state.pool, slotted)

    def _pool(self, name: str) -> _PoolState:
        state = self._pools.get(name)
        if state is None:
            state = self._pools[name] = _PoolState(name)
        return state

    def _put_agent(self, agent: Agent) -> None:
        old = self._agents.get(agent.id)
        self._agents[agent.id] = agent
        if old is not None and old.resource_pool != agent.resource_pool:
            self._leave_pool(agent.id, old.resource_pool)
        pool = self._pool(agent.resource_pool)
        pool.agents.add(agent.id)
        if old is None or _agent_shape(old) != _agent_shape(agent):
            pool.facts = pool.idle = None
        self._dirty_agents.add(agent.id)
        pool.dirty = True

    def _leave_pool(self, agent_id: str, pool_name: str) -> None:
        pool = self._pool(pool_name)
        pool.agents.discard(agent_id)
        pool.base.remove_agent(agent_id)
        pool.facts = pool.idle = None
        pool.dirty = True

    def _drop_agent(self, agent_id: str) -> None:
        old = self._agents.pop(agent_id, None)
        if old is None:
            return
        self._leave_pool(agent_id, old.resource_pool)
        self._dirty_agents.discard(agent_id)

    def _put_request(self, request: AllocationRequest) -> None:
        self._requests[request.allocation_id] = request
        pool = self._pool(request.resource_pool)
        pool.dirty = True
        if pool.fair is not None and request.slots_needed > 0:
            pool.fair.add(request)
        if not request.running:
            self._file(request)
            self._touched.add(request.allocation_id)
            return
        self._reported.pop(request.allocation_id, None)
        pool.running[request.slots_needed == 0][request.allocation_id] = request
        for placement in request.placements:
            self._on_agent.setdefault(placement.agent_id, set()).add(request.allocation_id)
            for slot_id in placement.slot_ids:
                self._claims[(placement.agent_id, slot_id)] = request.allocation_id
            self._occupancy_changed(placement.agent_id)

    def _drop_request(self, request_id: str) -> None:
        request = self._requests.pop(request_id, None)
        if request is None:
            return
        pool = self._pool(request.resource_pool)
        pool.dirty = True
        if pool.fair is not None and request.slots_needed > 0:
            pool.fair.remove(request)
        self._reported.pop(request_id, None)
        self._touched.discard(request_id)
        if not request.running:
            self._unfile(request_id)
            return
        pool.running[request.slots_needed == 0].pop(request_id, None)
        for placement in request.placements:
            self._on_agent.get(placement.agent_id, set()).discard(request_id)
            for slot_id in placement.slot_ids:
                if self._claims.get((placement.agent_id, slot_id)) == request_id:
                    del self._claims[(placement.agent_id, slot_id)]
            self._occupancy_changed(placement.agent_id)

    def _occupancy_changed(self, agent_id: str) -> None:
        self._dirty_agents.add(agent_id)
        agent = self._agents.get(agent_id)
        if agent is not None:
            self._pool(agent.resource_pool).dirty = True

    def _file(self, request: AllocationRequest) -> None:
        pool = self._pool(request.resource_pool)
        zero = request.slots_needed == 0
        priority = effective_priority(request, pool.pool)
        key = queue_key(request, pool.pool)
        shape = shape_of(request)
        queue = pool.pending[zero].setdefault(priority, {}).setdefault(shape, [])
        bisect.insort(queue, (key, request))
        self._places[request.allocation_id] = (pool.name, (zero, priority, shape), key)

    def _unfile(self, request_id: str) -> None:
        place = self._places.pop(request_id, None)
        if place is None:
            return
        pool_name, (zero, priority, shape), key = place
        levels = self._pools[pool_name].pending[zero]
        queue = levels[priority][shape]
        del queue[bisect.bisect_left(queue, (key,))]
        if not queue:
            del levels[priority][shape]
            if not levels[priority]:
                del levels[priority]

    def _check_placements(self, field: str, request: AllocationRequest) -> None:
        """A whole state's checks (validation.py), against the session's agents and the slots the
        running requests on the named agents claim."""
        named = {p.agent_id for p in request.placements}
        slots_by_agent = {a: {s.id for s in self._agents[a].slots} for a in named if a in self._agents}
        claimed = {
            (agent_id, slot_id): request_id
            for agent_id in named
            for request_id in self._on_agent.get(agent_id, ())
            for placement in self._requests[request_id].placements
            if placement.agent_id == agent_id
            for slot_id in placement.slot_ids
        }
        validate_placements(field, request, slots_by_agent, claimed)

    # -- decisions -----------------------------------------------------------------------------

    def decide(self) -> SessionAnswer:
        """The decision `schedule` would give for the session's state, with only the waiting
        reasons that changed since the previous answer."""
        self._refresh_capacity()
        self.work = Work()
        changed: dict[str, str] = {}
        assignments: list[Assignment] = []
        preemptions: list[Preemption] = []
        shares: list[PoolShares] = []
        for name in sorted(self._pools):
            pool = self._pools[name]
            if not pool.has_requests():
                if pool.outcome.shares is not None:
                    # Its work has all ended: nobody holds or wants a share any more.
                    shares.append(PoolShares(name))
                pool.outcome, pool.tails, pool.group_tails, pool.dirty = _Outcome(), {}, {}, False
                continue
            if pool.dirty:
                self._decide_pool(pool, changed)
                if pool.outcome.shares is not None:
                    shares.append(pool.outcome.shares)
            assignments.extend(Assignment(r.allocation_id, fit.placements) for r, fit in pool.outcome.started)
            preemptions.extend(pool.outcome.preemptions)
        self._touched.clear()
        waiting = tuple(Waiting(request_id, reason, 0) for request_id, reason in sorted(changed.items()))
        return SessionAnswer(tuple(assignments), tuple(preemptions), waiting, tuple(shares))

    def _refresh_capacity(self) -> None:
        """Rebuild the capacity of each agent whose slots or occupants changed."""
        for agent_id in self._dirty_agents:
            agent = self._agents.get(agent_id)
            if agent is None:
                continue
            running = [self._requests[r] for r in self._on_agent.get(agent_id, ())]
            zero_slot = {r.allocation_id for r in running if r.slots_needed == 0}
            self._pool(agent.resource_pool).base.set_agent(
                AgentCapacity(
                    agent_id=agent.id,
                    takes_new_work=agent.takes_new_work,
                    slot_ids=tuple(sorted((slot.id for slot in agent.slots), key=slot_order_key)),
                    enabled_slots=frozenset(slot.id for slot in agent.slots if slot.enabled),
                    occupant={
                        slot.id: slot.allocation_id or self._claims.get((agent.id, slot.id))
                        for slot in agent.slots
                    },
                    zero_slot_allocations=zero_slot,
                    topology=topology_of(agent.slots),
                )
            )
        self._dirty_agents.clear()

    def _decide_pool(self, pool: _PoolState, changed: dict[str, str]) -> None:
        pool.dirty = False
        outcome = _Outcome()
        explicit: dict[str, str] = {}
        tails: list[tuple[bool, Tail]] = []
        group_tails: list[GroupTail] = []
        if pool.config is None:
            reason = reasons.pool_missing(pool.name)
            for zero in (False, True):
                for level in pool.pending[zero].values():
                    for queue in level.values():
                        explicit.update((r.allocation_id, reason) for _, r in queue)
        else:
            if pool.facts is None:
                pool.facts = PoolFacts.of(pool.name, [self._agents[a] for a in pool.agents])
            if pool.idle is None:
                pool.idle = pool.base.emptied()
                pool.idle_fits = {}
            for zero in (False, True):
                levels = sorted(pool.pending[zero].items())
                if pool.config.scheduler_type is SchedulerType.FAIR_SHARE and not zero:
                    # Running work alone may be over a quota's maximum: decided even then. The
                    # pass reads the pool's FairQueue as kept, and looks at requests one by one
                    # only while that can change something (fair_share.py).
                    assert pool.fair is not None
                    result = run_fair_share_pass(
                        pool.config, pool.facts, pool.base.copy(), pool.fair, pool.idle, pool.idle_fits
                    )
                    outcome.started.extend(result.started)
                    outcome.preemptions.extend(result.preemptions)
                    outcome.shares = result.shares
                    explicit.update(result.waiting)
                    group_tails.extend(result.group_tails)
                    self.work.examined += result.examined
                    continue
                if not zero and Quotas.set_in(pool.config):
                    # Quotas: decided whole, as fair share is (each request's quota is its own, and
                    # running work alone may be over a maximum).
                    pending = [r for _, level in levels for queue in level.values() for _, r in queue]
                    running = list(pool.running[zero].values())
                    result = run_priority_quota_pass(
                        pool.config, pool.facts, pool.base.copy(), pending, running, pool.idle, pool.idle_fits
                    )
                    outcome.started.extend(result.started)
                    outcome.preemptions.extend(result.preemptions)
                    explicit.update(result.waiting)
                    continue
                if not levels:
                    continue
                running = list(pool.running[zero].values()) if pool.config.preemption_enabled else []
                result = run_priority_pass(
                    pool.config, pool.facts, pool.base.copy(), levels, running, pool.idle, pool.idle_fits
                )
                outcome.started.extend(result.started)
                outcome.preemptions.extend(result.preemptions)
                explicit.update(result.waiting)
                tails.extend((zero, tail) for tail in result.tails)
        for request, _ in outcome.started:
            self._reported.pop(request.allocation_id, None)
        for request_id, reason in explicit.items():
            self._report(request_id, reason, changed)
        self._report_tails(pool, tails, changed)
        self._report_group_tails(pool, group_tails, changed)
        pool.outcome = outcome

    def _report(self, request_id: str, reason: str, changed: dict[str, str]) -> None:
        self.work.reasons_compared += 1
        if self._reported.get(request_id) != reason:
            self._reported[request_id] = reason
            changed[request_id] = reason

    def _report_tails(
        self, pool: _PoolState, tails: list[tuple[bool, Tail]], changed: dict[str, str]
    ) -> None:
        """Report the tails' requests whose reason changed, looking only where it can have: a
        tail that keeps its reason changed only at its front (it grew or shrank there) and where
        requests were added or changed since the last answer."""
        now: dict[QueuePlace, tuple[QueueKey, str]] = {}
        for zero, tail in tails:
            place = (zero, tail.priority, tail.shape)
            start = tail.requests[0][0]
            now[place] = (start, tail.reason)
            before = pool.tails.get(place)
            if before is None or before[1] != tail.reason:
                for _, request in tail.requests:
                    self._report(request.allocation_id, tail.reason, changed)
                continue
            for key, request in tail.requests:
                if key >= before[0]:
                    break
                self._report(request.allocation_id, tail.reason, changed)
        for request_id in self._touched:
            where = self._places.get(request_id)
            if where is None or where[0] != pool.name:
                continue
            tail_now = now.get(where[1])
            if tail_now is not None and where[2] >= tail_now[0]:
                self._report(request_id, tail_now[1], changed)
        pool.tails = now

    def _report_group_tails(self, pool: _PoolState, tails: list[GroupTail], changed: dict[str, str]) -> None:
        """Report the group tails' requests whose reason changed, looking only where it can have:
        a tail that keeps its reason changed only by the requests looked at one by one then and
        not now, and by requests added or changed since the last answer."""
        now: dict[Place, tuple[str, frozenset[str]]] = {}
        told_whole: set[Place] = set()
        for tail in tails:
            now[tail.place] = (tail.reason, tail.excluded)
            before = pool.group_tails.get(tail.place)
            if before is None or before[0] != tail.reason:
                for member in tail.members():
                    self._report(member.allocation_id, tail.reason, changed)
                told_whole.add(tail.place)
                continue
            for request_id in before[1] - tail.excluded:
                known = self._requests.get(request_id)
                if known is not None and self._waits_at(pool, known) == tail.place:
                    self._report(request_id, tail.reason, changed)
        for request_id in self._touched:
            request = self._requests.get(request_id)
            place = self._waits_at(pool, request) if request is not None else None
            tail_now = now.get(place) if place is not None and place not in told_whole else None
            if tail_now is not None and request_id not in tail_now[1]:
                self._report(request_id, tail_now[0], changed)
        pool.group_tails = now

    @staticmethod
    def _waits_at(pool: _PoolState, request: AllocationRequest) -> Place | None:
        """Where a pending slotted request of the fair-share `pool` waits (None: elsewhere)."""
        if request.resource_pool != pool.name or request.running or request.slots_needed == 0:
            return None
        return place_of(request)


def _check_pools(pools: tuple[ResourcePool, ...]) -> None:
    validate_state(ClusterState(pools=pools))


def _check_agent(field: str, agent: Agent) -> None:
    try:
        validate_state(ClusterState(agents=(agent,)))
    except InvalidScheduleInput as exc:
        raise InvalidScheduleInput(exc.field.replace("agents[0]", field, 1), exc.problem) from None


def _check_request(field: str, request: AllocationRequest) -> None:
    if not request.allocation_id:
        raise InvalidScheduleInput(f"{field}.allocation_id", "must not be empty")
    if not request.resource_pool:
        raise InvalidScheduleInput(f"{field}.resource_pool", "must not be empty")
    if request.slots_needed < 0:
        raise InvalidScheduleInput(f"{field}.slots_needed", "must be >= 0")
    if request.priority < 0:
        raise InvalidScheduleInput(f"{field}.priority", "must be >= 0 (0 means the pool's default)")
    check_weight(field, request)
