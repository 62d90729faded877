"""Why a request waits, in words a user can act on (shown by `cairn job list` and the WebUI)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.scheduler.domain.capacity import PoolCapacity
from services.scheduler.domain.model import Agent, AllocationRequest

# How many unusable agents a reason names before it summarizes the rest.
MAX_AGENTS_NAMED = 3


@dataclass(frozen=True)
class PoolFacts:
    """What a pool could offer at best, computed once per pass."""

    name: str
    agent_count: int
    # Enabled slots on agents that take new work.
    usable_slots: int
    largest_agent_slots: int
    # "agent 'a1' is disabled", "agent 'a2' is draining", "agent 'a3' has 2 disabled slots".
    unusable: tuple[str, ...]

    @classmethod
    def of(cls, name: str, agents: Sequence[Agent]) -> PoolFacts:
        usable = [a for a in agents if a.takes_new_work]
        sizes = [sum(1 for s in a.slots if s.enabled) for a in usable]
        notes: list[str] = []
        for agent in sorted(agents, key=lambda a: a.id):
            disabled_slots = sum(1 for s in agent.slots if not s.enabled)
            if not agent.enabled:
                notes.append(f"agent '{agent.id}' is disabled")
            elif agent.draining:
                notes.append(f"agent '{agent.id}' is draining")
            elif disabled_slots:
                plural = "s" if disabled_slots != 1 else ""
                notes.append(f"agent '{agent.id}' has {disabled_slots} disabled slot{plural}")
        return cls(
            name=name,
            agent_count=len(agents),
            usable_slots=sum(sizes),
            largest_agent_slots=max(sizes, default=0),
            unusable=tuple(notes),
        )

    def unusable_note(self) -> str:
        if not self.unusable:
            return ""
        named = list(self.unusable[:MAX_AGENTS_NAMED])
        if len(self.unusable) > MAX_AGENTS_NAMED:
            named.append(f"{len(self.unusable) - MAX_AGENTS_NAMED} more agents cannot take work")
        return " (" + "; ".join(named) + ")"


def _slots(n: int) -> str:
    return f"{n} slot" if n == 1 else f"{n} slots"


def pool_missing(pool_name: str) -> str:
    return f"resource pool '{pool_name}' does not exist"


def cannot_fit(
    request: AllocationRequest, facts: PoolFacts, capacity: PoolCapacity, fits_when_pool_idle: bool
) -> str:
    """Why `request` found no place in the working state `capacity`.

    `fits_when_pool_idle` says whether it would fit if nothing ran in the pool: if not, waiting
    alone will never start it, and the reason says what about the pool stands in the way.
    """
    note = facts.unusable_note()
    if facts.agent_count == 0:
        return f"pool '{facts.name}' has no agents"
    if request.excluded_agents and all(a.agent_id in request.excluded_agents for a in capacity):
        excluded = ", ".join(sorted(request.excluded_agents))
        return f"its log policies exclude agent(s) {excluded}: no other agent in pool '{facts.name}'"
    if request.slots_needed == 0:
        return f"no agent in pool '{facts.name}' takes new work{note}"
    needed = request.slots_needed
    if needed > facts.usable_slots:
        return f"pool '{facts.name}' has {_slots(facts.usable_slots)} in all; request needs {needed}{note}"
    if not fits_when_pool_idle:
        if request.single_agent:
            return (
                f"needs {_slots(needed)} on one agent; the largest agent in pool '{facts.name}' "
                f"has {_slots(facts.largest_agent_slots)}{note}"
            )
        return (
            f"needs {_slots(needed)}: more than any agent in pool '{facts.name}' has "
            f"({facts.largest_agent_slots}), and a multi-agent fit takes every slot of agents of one "
            f"size, so it needs a multiple of an agent's slot count{note}"
        )
    largest = min(capacity, key=lambda a: (-a.num_free, a.agent_id), default=None)
    if largest is None or largest.num_free == 0:
        return f"needs {_slots(needed)}; no agent in pool '{facts.name}' has a free slot{note}"
    return (
        f"needs {_slots(needed)}; the largest free block in pool '{facts.name}' is "
        f"{_slots(largest.num_free)} on agent '{largest.agent_id}'{note}"
    )


def behind_higher_priority(blocker: AllocationRequest, blocker_priority: int, backfill_rule: str) -> str:
    return (
        f"waiting behind higher-priority work ('{blocker.allocation_id}' at priority {blocker_priority} "
        f"cannot start yet){backfill_rule}"
    )


ONLY_PREEMPTIBLE_BACKFILLS = "; only preemptible work may start ahead of it"


def preempting(victims: Sequence[str]) -> str:
    plural = "s" if len(victims) != 1 else ""
    return (
        f"preempting {len(victims)} lower-priority allocation{plural} to make room; "
        "starts once they release their slots"
    )


def held_for_preemption(preemptor: str) -> str:
    return f"waiting while lower-priority work is preempted to make room for '{preemptor}'"


RESERVED_AFTER_PREEMPTION = "starts once preempted work releases its slots"


# ---- Fair share (fair_share.py) ----


def over_quota(group: str, held: int, maximum: int, pool: str) -> str:
    return (
        f"{group} holds {_slots(held)} of its maximum of {maximum} in pool '{pool}'; "
        "starts when its own work ends"
    )


def below_fair_share(group: str, held: int, share: int, why_not: str) -> str:
    return f"{group} holds {held} of the {_slots(share)} its fair share gives it; {why_not}"


def reclaiming(victims: Sequence[str], pool: str) -> str:
    plural = "s" if len(victims) != 1 else ""
    return (
        f"reclaiming its fair share of pool '{pool}': preempting {len(victims)} allocation{plural} "
        "of work over its share; starts once they release their slots"
    )


def held_for_fair_share(deprived: AllocationRequest, group: str) -> str:
    return (
        f"free slots are kept for '{deprived.allocation_id}': {group} is below its fair share, "
        "and only work within its share starts until it fits"
    )


# ---- A priority pool's guarantees (quota_pass.py) ----


def below_guarantee(group: str, held: int, guaranteed: int, pool: str, why_not: str) -> str:
    return f"{group} holds {held} of its {_slots(guaranteed)} guaranteed in pool '{pool}'; {why_not}"


def reclaiming_guarantee(victims: Sequence[str], group: str, pool: str) -> str:
    plural = "s" if len(victims) != 1 else ""
    return (
        f"reclaiming the slots guaranteed to {group} in pool '{pool}': preempting {len(victims)} "
        f"allocation{plural} of work over its own guarantee; starts once they release their slots"
    )


def held_for_guarantee(deprived: AllocationRequest, group: str, pool: str) -> str:
    return (
        f"free slots are kept for '{deprived.allocation_id}': {group} is below its guaranteed slots in "
        f"pool '{pool}', and only guaranteed work starts until it fits"
    )
