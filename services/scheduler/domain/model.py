"""What the scheduler is given (pools, agents, requests) and what it answers (a decision)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FittingPolicy(enum.Enum):
    # Pack work onto the fullest agent that fits, keeping whole agents free for large requests.
    BEST = "best"
    # Spread work onto the emptiest agent.
    WORST = "worst"


class SchedulerType(enum.Enum):
    # Determined's priority scheduler.
    PRIORITY = "priority"
    # Hierarchical fair share (fair_share.py): workspace -> user -> job.
    FAIR_SHARE = "fair_share"


@dataclass(frozen=True)
class ShareGroup:
    """A workspace, or a user within a workspace, in one pool: its weight among its siblings, its
    recent usage, and its quotas (fair_share.py says how each is used)."""

    # A workspace: its id; a user: "<workspace id>/<user id>".
    key: str
    weight: float = 1.0
    # Slot-seconds used in the pool lately, decayed by the pool's half-life (the master's sum).
    recent_slot_seconds: float = 0.0
    # Slots guaranteed while it wants them; 0: none.
    guaranteed_slots: int = 0
    # Slots it may never exceed; 0: no cap.
    max_slots: int = 0
    # What people call it, for waiting reasons ("workspace 'vision'"); "" : the key.
    name: str = ""


@dataclass(frozen=True)
class ResourcePool:
    name: str
    fitting_policy: FittingPolicy = FittingPolicy.BEST
    preemption_enabled: bool = False
    # 0 means "not set": proto3 cannot tell an unset field from 0, and 0 is no Determined priority.
    default_priority: int = 0
    scheduler_type: SchedulerType = SchedulerType.PRIORITY
    # Fair share's groups with a weight, a quota or recent usage (absent: weight 1, none).
    workspaces: tuple[ShareGroup, ...] = ()
    users: tuple[ShareGroup, ...] = ()
    # Fair share: running work placed after this (nanoseconds since the epoch) is not reclaimed
    # yet; 0: none protected.
    protect_started_after_ns: int = 0


@dataclass(frozen=True)
class Slot:
    id: str
    enabled: bool = True
    # The allocation using the slot; empty when free.
    allocation_id: str = ""
    # Where its GPU sits (-1: unknown): see capacity.pack_slots.
    nvlink_domain: int = -1
    numa_node: int = -1


@dataclass(frozen=True)
class Agent:
    id: str
    resource_pool: str
    enabled: bool = True
    # A draining agent keeps its running work but takes nothing new.
    draining: bool = False
    slots: tuple[Slot, ...] = ()

    @property
    def takes_new_work(self) -> bool:
        return self.enabled and not self.draining


@dataclass(frozen=True)
class Placement:
    agent_id: str
    slot_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class AllocationRequest:
    allocation_id: str
    resource_pool: str
    slots_needed: int
    # Smaller runs first; 0 means the pool's default.
    priority: int = 0
    # Queue order within a priority: the job's submission time, then the request's (nanoseconds
    # since the epoch; 0 when the master sent none).
    job_submitted_at_ns: int = 0
    requested_at_ns: int = 0
    job_id: str = ""
    preemptible: bool = False
    single_agent: bool = False
    # Empty while pending; where it runs once placed.
    placements: tuple[Placement, ...] = ()
    # Agents it must not be placed on (its trial's `exclude_node` log policy matched there).
    excluded_agents: frozenset[str] = frozenset()
    # Whose work it is, as ShareGroup keys: fair share divides a pool by them.
    workspace: str = ""
    user: str = ""
    # The job's weight among its owner's jobs (Determined's `resources.weight`).
    weight: float = 1.0
    # When a running request was placed (nanoseconds since the epoch; 0 unknown): fair share
    # reclaims the oldest borrowed slots first.
    started_at_ns: int = 0

    @property
    def running(self) -> bool:
        return bool(self.placements)

    @property
    def job_key(self) -> str:
        """Which job the request belongs to; a request without a job is a job of its own."""
        return self.job_id or f"allocation:{self.allocation_id}"


@dataclass(frozen=True)
class ClusterState:
    pools: tuple[ResourcePool, ...] = ()
    agents: tuple[Agent, ...] = ()
    requests: tuple[AllocationRequest, ...] = ()


@dataclass(frozen=True)
class Assignment:
    allocation_id: str
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class Preemption:
    allocation_id: str
    # The request it makes room for.
    for_allocation_id: str


@dataclass(frozen=True)
class Waiting:
    allocation_id: str
    reason: str
    # Position among the requests still waiting in its pool, 0-based.
    queue_position: int


@dataclass(frozen=True)
class GroupShare:
    """A workspace's or user's part of a fair-share pool at a decision."""

    key: str
    name: str
    # Its weighted share were every group present to want the whole pool.
    nominal_slots: int
    # What its share gives it now, with what each group wants.
    entitled_slots: int
    held_slots: int
    wanted_slots: int


@dataclass(frozen=True)
class PoolShares:
    resource_pool: str
    workspaces: tuple[GroupShare, ...] = ()
    users: tuple[GroupShare, ...] = ()


@dataclass(frozen=True)
class Decision:
    assignments: tuple[Assignment, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    # The fair-share pools' divisions.
    shares: tuple[PoolShares, ...] = ()
