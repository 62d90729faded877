"""Where a request would go in a pool's working state (Determined's `findFits`).

Order of attempts:
1. Shared fit: one agent with enough free enabled slots, the best-scored by the pool's policy.
2. Only for requests that may span agents and need more than one slot: a dedicated multi-agent fit
   over agents with no slot in use, all of one size, each giving every free slot it has.
Zero-slot requests (commands, TensorBoards, GC tasks) need no slot: any agent that takes new work.
An agent the request excludes (its trial's `exclude_node` log policy) is never a candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from services.scheduler.domain.capacity import AgentCapacity, PoolCapacity
from services.scheduler.domain.free_index import Counts, hash_distance
from services.scheduler.domain.model import AllocationRequest, FittingPolicy, Placement

# A score from the policy: higher is better. Floats as in Determined: division is correctly
# rounded, so equal ratios tie exactly, and ratios of slot counts are far too coarse to collide.
Score = Callable[[AgentCapacity], float]


@dataclass(frozen=True)
class Fit:
    placements: tuple[Placement, ...]


def best_fit_score(agent: AgentCapacity) -> float:
    # Determined's BestFit: 1/(1+empty) — the fullest agent wins, whole agents stay free.
    return 1.0 / (1 + agent.num_free)


def worst_fit_score(agent: AgentCapacity) -> float:
    # Determined's WorstFit: empty/total — the emptiest agent wins, work spreads out.
    return agent.num_free / agent.num_usable if agent.num_usable else 0.0


def zero_slot_score(agent: AgentCapacity) -> float:
    # Spread zero-slot work: the agent running the fewest zero-slot allocations wins. (Determined
    # scores zero-slot units against `max_aux_containers_per_agent`, which this contract lacks.)
    return 1.0 / (1 + len(agent.zero_slot_allocations))


SCORES: dict[FittingPolicy, Score] = {
    FittingPolicy.BEST: best_fit_score,
    FittingPolicy.WORST: worst_fit_score,
}


def rank_agents(
    request: AllocationRequest, candidates: Iterable[AgentCapacity], score: Score
) -> list[AgentCapacity]:
    """Best first: highest score, then smallest hash distance, then agent id."""
    return sorted(
        candidates,
        key=lambda agent: (
            -score(agent),
            hash_distance(request.allocation_id, agent.agent_id),
            agent.agent_id,
        ),
    )


_T = TypeVar("_T")


def _top_scored(items: Iterable[_T], score: Callable[[_T], float]) -> list[_T]:
    """The items of the highest score: every one that has it (exact float ties, as Determined)."""
    best: list[_T] = []
    top = 0.0
    for item in items:
        value = score(item)
        if not best or value > top:
            top, best = value, [item]
        elif value == top:
            best.append(item)
    return best


def best_agent(
    request: AllocationRequest, candidates: Iterable[AgentCapacity], score: Score
) -> AgentCapacity | None:
    """rank_agents(...)[0] without ranking the rest: one pass for the best score, then the
    tie-break among the agents that share it only. A request placed on a pool of 1,000 agents
    sorted all of them by (score, hash distance, id) to take the first: three quarters of the
    scheduler's CPU when trials arrive at a pace (`bench.sim_agents --paced`)."""
    best = _top_scored(candidates, score)
    if len(best) <= 1:
        return best[0] if best else None
    return min(best, key=lambda agent: (hash_distance(request.allocation_id, agent.agent_id), agent.agent_id))


def find_fit(request: AllocationRequest, pool: PoolCapacity, policy: FittingPolicy) -> Fit | None:
    if request.slots_needed == 0:
        return _zero_slot_fit(request, pool)
    shared = _shared_fit(request, pool, SCORES[policy])
    if shared is not None:
        return shared
    if request.single_agent or request.slots_needed <= 1:
        return None
    return _dedicated_fit(request, pool, SCORES[policy])


def _allowed(request: AllocationRequest, agent: AgentCapacity) -> bool:
    return agent.agent_id not in request.excluded_agents


def apply_fit(pool: PoolCapacity, fit: Fit, allocation_id: str) -> None:
    for placement in fit.placements:
        if placement.slot_ids:
            pool.take(placement.agent_id, placement.slot_ids, allocation_id)
        else:
            pool.add_zero_slot(placement.agent_id, allocation_id)


def _zero_slot_fit(request: AllocationRequest, pool: PoolCapacity) -> Fit | None:
    chosen = best_agent(
        request, (a for a in pool if a.takes_new_work and _allowed(request, a)), zero_slot_score
    )
    if chosen is None:
        return None
    return Fit((Placement(chosen.agent_id, ()),))


def filed_best_agent(request: AllocationRequest, pool: PoolCapacity, score: Score) -> AgentCapacity | None:
    """best_agent over the agents with room for the request, from the pool's index of agents by
    their counts (free_index.py): the best-scored groups, then the nearest agent of each. Only for
    the policies' scores (SCORES), which read an agent's counts alone, and a request that excludes
    no agent."""
    index = pool.free_index()
    roomy = (counts for counts in index.counts() if counts[0] >= request.slots_needed)
    best: list[Counts] = _top_scored(roomy, lambda counts: score(pool.agents[index.any_agent(counts)]))
    if not best:
        return None
    _, agent_id = min(index.nearest(counts, request.allocation_id) for counts in best)
    return pool.agents[agent_id]


def _shared_fit(request: AllocationRequest, pool: PoolCapacity, score: Score) -> Fit | None:
    if request.excluded_agents:
        chosen = best_agent(
            request,
            (agent for agent in pool if agent.num_free >= request.slots_needed and _allowed(request, agent)),
            score,
        )
    else:
        chosen = filed_best_agent(request, pool, score)
    if chosen is None:
        return None
    slots = tuple(chosen.pick_slots(request.slots_needed))
    return Fit((Placement(chosen.agent_id, slots),))


def _dedicated_fit(request: AllocationRequest, pool: PoolCapacity, score: Score) -> Fit | None:
    # Determined's assumptions: a multi-agent request gets the same number of slots on every agent
    # (distributed training wants an even split) and every slot of each agent it uses. So group
    # the agents with nothing in use by how many slots they offer and try the biggest size first
    # (fewest agents). Heterogeneous fits (`allow_heterogeneous_fits`) are not in the contract.
    by_size: dict[int, list[AgentCapacity]] = {}
    for agent in pool:
        size = agent.num_free
        if size > 0 and agent.has_no_slot_in_use and _allowed(request, agent):
            by_size.setdefault(size, []).append(agent)
    needed = request.slots_needed
    for size in sorted(by_size, reverse=True):
        group = by_size[size]
        if len(group) * size < needed or needed % size != 0:
            continue
        chosen = rank_agents(request, group, score)[: needed // size]
        return Fit(tuple(Placement(agent.agent_id, tuple(agent.free_slots())) for agent in chosen))
    return None
