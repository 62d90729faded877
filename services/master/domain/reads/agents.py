"""Agents, their slots, and which allocation holds each slot (the slot map)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.master.domain.kernel.states import LIVE_ALLOCATION, PLACED_ALLOCATION
from services.master.store import models


@dataclass(frozen=True)
class AgentsView:
    agents: list[models.Agent]
    # agent id -> its slots, in slot order ("2" before "10")
    slots: dict[str, list[models.AgentSlot]]
    # (agent id, slot id) -> the allocation placed there
    holders: dict[tuple[str, str], models.Allocation]


def _slot_order(slot: models.AgentSlot) -> tuple[str, int, str]:
    return (slot.agent_id, int(slot.slot_id) if slot.slot_id.isdigit() else 0, slot.slot_id)


def placed_slots(s: Session) -> dict[tuple[str, str], models.Allocation]:
    """Which allocation holds each (agent, slot)."""
    result: dict[tuple[str, str], models.Allocation] = {}
    for alloc in s.scalars(
        select(models.Allocation).where(models.Allocation.state.in_(list(PLACED_ALLOCATION)))
    ):
        for placement in alloc.placements:
            for slot_id in placement.get("slot_ids", []):
                result[(placement["agent_id"], str(slot_id))] = alloc
    return result


def agents_with_slots(s: Session, agent_id: str | None = None) -> AgentsView:
    """Every agent (or one), its slots, and what runs on them."""
    query = select(models.Agent).order_by(models.Agent.id)
    slot_query = select(models.AgentSlot)
    if agent_id is not None:
        query = query.where(models.Agent.id == agent_id)
        slot_query = slot_query.where(models.AgentSlot.agent_id == agent_id)
    slots: dict[str, list[models.AgentSlot]] = {}
    for slot in sorted(s.scalars(slot_query), key=_slot_order):
        slots.setdefault(slot.agent_id, []).append(slot)
    return AgentsView(agents=list(s.scalars(query)), slots=slots, holders=placed_slots(s))


def live_allocations_by_pool(s: Session) -> dict[str, list[models.Allocation]]:
    """The allocations not yet ended, by resource pool (for the pools' queue counts)."""
    result: dict[str, list[models.Allocation]] = {}
    for alloc in s.scalars(
        select(models.Allocation).where(models.Allocation.state.in_(list(LIVE_ALLOCATION)))
    ):
        result.setdefault(alloc.resource_pool, []).append(alloc)
    return result


def allocation_runs_on(s: Session, allocation_id: str, agent_id: str) -> bool:
    """Whether any container of `allocation_id` was placed on `agent_id` (an agent downloads only
    the model definitions of its own allocations)."""
    found = s.scalar(
        select(models.Container.id)
        .where(models.Container.allocation_id == allocation_id, models.Container.agent_id == agent_id)
        .limit(1)
    )
    return found is not None
