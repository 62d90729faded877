"""A pool's agents as the scheduler sees them during one pass: which slots are free, which
allocation holds each used slot, and how many zero-slot allocations each agent runs.

Fits are applied to, and preempted work removed from, copies of this working state; the cluster
itself is never touched (the master applies the decision). Counts are kept up to date on every
change because fitting asks for them for every agent, for every request.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from services.scheduler.domain.free_index import Counts, FreeIndex
from services.scheduler.domain.model import Agent, AllocationRequest, Slot

# slot id -> (NVLink domain, NUMA node) of its GPU; only slots where either is known.
Topology = Mapping[str, tuple[int, int]]
NO_TOPOLOGY: Topology = MappingProxyType({})


def topology_of(slots: Iterable[Slot]) -> Topology:
    found = {s.id: (s.nvlink_domain, s.numa_node) for s in slots if s.nvlink_domain >= 0 or s.numa_node >= 0}
    return MappingProxyType(found) if found else NO_TOPOLOGY


def pack_slots(free: Sequence[str], count: int, topology: Topology) -> list[str]:
    """`count` of the `free` slots (lowest-numbered first), packed where the GPUs' topology is known:
    on one NVLink domain if one has that many free, and within it (or, when none has, among all)
    on one NUMA node if one has that many free; else the lowest-numbered. Of the domains (nodes)
    that fit, the one with the fewest free slots (best fit: the bigger groups stay whole for bigger
    requests), the lowest-numbered on a tie."""
    if count <= 1 or not topology:
        return list(free[:count])
    domain = _best_group(free, count, 0, topology)
    among = domain if domain is not None else list(free)
    node = _best_group(among, count, 1, topology)
    return (node if node is not None else among)[:count]


def _best_group(slots: Sequence[str], count: int, level: int, topology: Topology) -> list[str] | None:
    """The smallest group of `slots` sharing a known NVLink domain (level 0) or NUMA node (level 1)
    with room for `count`; None when none has."""
    groups: dict[int, list[str]] = {}
    for slot_id in slots:
        key = topology.get(slot_id, (-1, -1))[level]
        if key >= 0:
            groups.setdefault(key, []).append(slot_id)
    fitting = [g for g in groups.values() if len(g) >= count]
    if not fitting:
        return None
    return min(fitting, key=lambda g: (len(g), slot_order_key(g[0])))


def slot_order_key(slot_id: str) -> tuple[int, int, str]:
    """Slot ids are usually "0", "1", ...: order those numerically ("2" before "10"), others after
    them by text, so "the lowest-numbered free slots" means what a person expects."""
    if slot_id.isdecimal():
        return (0, int(slot_id), slot_id)
    return (1, 0, slot_id)


@dataclass
class AgentCapacity:
    agent_id: str
    # Enabled and not draining: Determined counts a disabled or draining agent as having no empty
    # slots, so it keeps what runs there but takes nothing new.
    takes_new_work: bool
    # Every slot, lowest-numbered first.
    slot_ids: tuple[str, ...]
    enabled_slots: frozenset[str]
    # slot id -> the allocation holding it, or None when free.
    occupant: dict[str, str | None]
    # Zero-slot allocations placed on this agent.
    zero_slot_allocations: set[str] = field(default_factory=set)
    # Where its GPUs sit (never changed in place: copies share it).
    topology: Topology = field(default_factory=lambda: NO_TOPOLOGY)
    _num_free: int = field(init=False, repr=False, default=0)
    _num_in_use: int = field(init=False, repr=False, default=0)

    def __post_init__(self) -> None:
        self._num_in_use = sum(1 for holder in self.occupant.values() if holder is not None)
        self._num_free = sum(1 for s in self.slot_ids if self._offers(s) and self.occupant[s] is None)

    def _offers(self, slot_id: str) -> bool:
        return self.takes_new_work and slot_id in self.enabled_slots

    def copy(self) -> AgentCapacity:
        return AgentCapacity(
            agent_id=self.agent_id,
            takes_new_work=self.takes_new_work,
            slot_ids=self.slot_ids,
            enabled_slots=self.enabled_slots,
            occupant=dict(self.occupant),
            zero_slot_allocations=set(self.zero_slot_allocations),
            topology=self.topology,
        )

    def free_slots(self) -> list[str]:
        """Slots new work may use, lowest-numbered first: only enabled, unoccupied slots of an
        agent that takes new work."""
        return [s for s in self.slot_ids if self._offers(s) and self.occupant[s] is None]

    def pick_slots(self, count: int) -> list[str]:
        """The free slots a request of `count` slots gets here, packed by topology (pack_slots)."""
        return pack_slots(self.free_slots(), count, self.topology)

    @property
    def num_free(self) -> int:
        return self._num_free

    @property
    def num_usable(self) -> int:
        """Determined's `numSlots` for a schedulable agent: its enabled slots, used or not."""
        return len(self.enabled_slots) if self.takes_new_work else 0

    @property
    def counts(self) -> Counts:
        """(free, usable): what both fitting policies score the agent on (free_index.py)."""
        return (self._num_free, self.num_usable)

    @property
    def has_no_slot_in_use(self) -> bool:
        """Determined's test for a dedicated multi-agent fit: no slot of the agent is in use."""
        return self._num_in_use == 0

    def take(self, slot_ids: Iterable[str], allocation_id: str) -> None:
        for slot_id in slot_ids:
            if self.occupant[slot_id] is not None:
                raise AssertionError(f"slot {self.agent_id}/{slot_id} is already taken")
            self.occupant[slot_id] = allocation_id
            self._num_in_use += 1
            if self._offers(slot_id):
                self._num_free -= 1

    def add_zero_slot(self, allocation_id: str) -> None:
        self.zero_slot_allocations.add(allocation_id)

    def release(self, allocation_id: str) -> None:
        for slot_id, holder in self.occupant.items():
            if holder == allocation_id:
                self.occupant[slot_id] = None
                self._num_in_use -= 1
                if self._offers(slot_id):
                    self._num_free += 1
        self.zero_slot_allocations.discard(allocation_id)

    def emptied(self) -> AgentCapacity:
        """The agent with nothing running: what it could offer at best."""
        return AgentCapacity(
            agent_id=self.agent_id,
            takes_new_work=self.takes_new_work,
            slot_ids=self.slot_ids,
            enabled_slots=self.enabled_slots,
            occupant=dict.fromkeys(self.slot_ids),
            topology=self.topology,
        )

    def holders(self) -> set[str]:
        return {h for h in self.occupant.values() if h is not None} | self.zero_slot_allocations


class PoolCapacity:
    """A pool's agents. Copies are copy-on-write: a pass copies the pool for every kind of request
    and every preemption it plans, and usually changes a few agents of a thousand, so a copy
    shares every agent (and every host set) with its original until it first changes it. Shared
    objects are never changed in place by anyone: the owner of an object is the one copy that
    made it.

    The agents with free slots are also filed by their counts (free_index.py), built at the first
    fit or copy and kept up to date by every change here, so a fit looks at a few groups of agents
    rather than every agent."""

    def __init__(
        self,
        agents: dict[str, AgentCapacity],
        hosts: dict[str, set[str]] | None = None,
        index: FreeIndex | None = None,
    ) -> None:
        self.agents = agents
        self._index = index
        # allocation id -> the agents it holds something on, so releasing one visits only those.
        self._hosts: dict[str, set[str]] = {} if hosts is None else hosts
        # Which agents and host sets this copy made itself (and so may change in place).
        self._own_agents: set[str] = set(agents) if hosts is None else set()
        self._own_hosts: set[str] = set()
        # A copy shares its original's two dicts too until its first change.
        self._shared_dicts = hosts is not None
        if hosts is None:
            for agent in self.agents.values():
                for holder in agent.holders():
                    self._hosts.setdefault(holder, set()).add(agent.agent_id)
            self._own_hosts = set(self._hosts)

    def _unshare(self) -> None:
        if self._shared_dicts:
            self.agents = dict(self.agents)
            self._hosts = dict(self._hosts)
            self._shared_dicts = False

    def __iter__(self) -> Iterator[AgentCapacity]:
        return iter(self.agents.values())

    def copy(self) -> PoolCapacity:
        index = self.free_index().copy()
        # From now on the original shares everything with the copy too: it copies an agent, a host
        # set or its dicts before it changes them, so neither sees the other's later changes (the
        # copy's index stays true to the agents it sees).
        self._shared_dicts = True
        self._own_agents = set()
        self._own_hosts = set()
        return PoolCapacity(self.agents, self._hosts, index)

    def free_index(self) -> FreeIndex:
        """The agents with free slots by their counts (built on first use)."""
        if self._index is None:
            self._index = FreeIndex.of((a.agent_id, a.counts) for a in self.agents.values())
        return self._index

    def _refiled(self, agent: AgentCapacity, before: Counts) -> None:
        if self._index is not None:
            self._index.move(agent.agent_id, before, agent.counts)

    def emptied(self) -> PoolCapacity:
        return PoolCapacity({agent_id: agent.emptied() for agent_id, agent in self.agents.items()})

    def _agent(self, agent_id: str) -> AgentCapacity:
        """The agent, made this copy's own before it changes."""
        self._unshare()
        if agent_id not in self._own_agents:
            self.agents[agent_id] = self.agents[agent_id].copy()
            self._own_agents.add(agent_id)
        return self.agents[agent_id]

    def _add_host(self, allocation_id: str, agent_id: str) -> None:
        self._unshare()
        hosts = self._hosts.get(allocation_id)
        if hosts is None:
            self._hosts[allocation_id] = {agent_id}
            self._own_hosts.add(allocation_id)
            return
        if allocation_id not in self._own_hosts:
            hosts = self._hosts[allocation_id] = set(hosts)
            self._own_hosts.add(allocation_id)
        hosts.add(agent_id)

    def take(self, agent_id: str, slot_ids: Iterable[str], allocation_id: str) -> None:
        agent = self._agent(agent_id)
        before = agent.counts
        agent.take(slot_ids, allocation_id)
        self._refiled(agent, before)
        self._add_host(allocation_id, agent_id)

    def add_zero_slot(self, agent_id: str, allocation_id: str) -> None:
        self._agent(agent_id).add_zero_slot(allocation_id)
        self._add_host(allocation_id, agent_id)

    def release(self, allocation_id: str) -> None:
        self._unshare()
        self._own_hosts.discard(allocation_id)
        for agent_id in self._hosts.pop(allocation_id, set()):
            if agent_id in self.agents:
                agent = self._agent(agent_id)
                before = agent.counts
                agent.release(allocation_id)
                self._refiled(agent, before)

    def set_agent(self, agent: AgentCapacity) -> None:
        """Put in (or replace) an agent; what it holds is recorded as held. The session's base
        state changes this way when an agent joins or changes."""
        self.remove_agent(agent.agent_id)
        self.agents[agent.agent_id] = agent
        self._own_agents.add(agent.agent_id)
        self._refiled(agent, (0, 0))
        for holder in agent.holders():
            self._add_host(holder, agent.agent_id)

    def remove_agent(self, agent_id: str) -> None:
        self._unshare()
        old = self.agents.pop(agent_id, None)
        self._own_agents.discard(agent_id)
        if old is None:
            return
        if self._index is not None:
            self._index.move(agent_id, old.counts, (0, 0))
        for holder in old.holders():
            hosts = self._hosts.get(holder)
            if hosts is None:
                continue
            if holder not in self._own_hosts:
                hosts = self._hosts[holder] = set(hosts)
                self._own_hosts.add(holder)
            hosts.discard(agent_id)
            if not hosts:
                del self._hosts[holder]
                self._own_hosts.discard(holder)

    def holds(self, allocation_id: str) -> bool:
        return allocation_id in self._hosts


def build_pool_capacity(agents: Iterable[Agent], requests: Iterable[AllocationRequest]) -> PoolCapacity:
    """The working state of `agents` given every running request in the cluster.

    A slot is used when the agent says so (its `allocation_id`) or when a running request's
    placement names it: the master may be mid-update, and either word is enough to keep new work
    off the slot. Where both name an allocation, the agent's word wins.
    """
    pool_agents = list(agents)
    agent_ids = {agent.id for agent in pool_agents}
    claimed: dict[tuple[str, str], str] = {}
    zero_slot: dict[str, set[str]] = {agent_id: set() for agent_id in agent_ids}
    for request in requests:
        for placement in request.placements:
            if placement.agent_id not in agent_ids:
                continue
            if request.slots_needed == 0:
                zero_slot[placement.agent_id].add(request.allocation_id)
            for slot_id in placement.slot_ids:
                claimed[(placement.agent_id, slot_id)] = request.allocation_id
    capacities: dict[str, AgentCapacity] = {}
    for agent in pool_agents:
        slot_ids = tuple(sorted((slot.id for slot in agent.slots), key=slot_order_key))
        occupant: dict[str, str | None] = {
            slot.id: slot.allocation_id or claimed.get((agent.id, slot.id)) for slot in agent.slots
        }
        capacities[agent.id] = AgentCapacity(
            agent_id=agent.id,
            takes_new_work=agent.takes_new_work,
            slot_ids=slot_ids,
            enabled_slots=frozenset(slot.id for slot in agent.slots if slot.enabled),
            occupant=occupant,
            zero_slot_allocations=zero_slot[agent.id],
            topology=topology_of(agent.slots),
        )
    return PoolCapacity(capacities)
