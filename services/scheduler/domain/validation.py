"""Checks that the cluster state is self-consistent before anything is decided from it.

The master builds this state from its database; a contradiction (two requests with one id, a
placement on a slot that does not exist) means the master and scheduler disagree about the cluster,
and any decision taken from it could double-book a slot. So it is refused, naming the field.
"""

from __future__ import annotations

import math

from services.scheduler.domain.errors import InvalidScheduleInput
from services.scheduler.domain.model import AllocationRequest, ClusterState, ShareGroup


def validate_state(state: ClusterState) -> None:
    _validate_pools(state)
    slots_by_agent = _validate_agents(state)
    _validate_requests(state, slots_by_agent)


def _validate_pools(state: ClusterState) -> None:
    seen: set[str] = set()
    for i, pool in enumerate(state.pools):
        if not pool.name:
            raise InvalidScheduleInput(f"pools[{i}].name", "must not be empty")
        if pool.name in seen:
            raise InvalidScheduleInput(f"pools[{i}].name", f"duplicate pool name '{pool.name}'")
        seen.add(pool.name)
        if pool.default_priority < 0:
            raise InvalidScheduleInput(f"pools[{i}].default_priority", "must be >= 0")
        _validate_groups(f"pools[{i}].workspaces", pool.workspaces)
        _validate_groups(f"pools[{i}].users", pool.users)


def _validate_groups(field: str, groups: tuple[ShareGroup, ...]) -> None:
    keys: set[str] = set()
    for j, group in enumerate(groups):
        where = f"{field}[{j}]"
        if not group.key:
            raise InvalidScheduleInput(f"{where}.key", "must not be empty")
        if group.key in keys:
            raise InvalidScheduleInput(f"{where}.key", f"duplicate key '{group.key}'")
        keys.add(group.key)
        for name, value in (("weight", group.weight), ("recent_slot_seconds", group.recent_slot_seconds)):
            if not math.isfinite(value) or value < 0:
                raise InvalidScheduleInput(f"{where}.{name}", "must be a finite number >= 0")
        if group.guaranteed_slots < 0 or group.max_slots < 0:
            raise InvalidScheduleInput(f"{where}", "guaranteed_slots and max_slots must be >= 0")


def _validate_agents(state: ClusterState) -> dict[str, set[str]]:
    slots_by_agent: dict[str, set[str]] = {}
    for i, agent in enumerate(state.agents):
        if not agent.id:
            raise InvalidScheduleInput(f"agents[{i}].id", "must not be empty")
        if agent.id in slots_by_agent:
            raise InvalidScheduleInput(f"agents[{i}].id", f"duplicate agent id '{agent.id}'")
        slot_ids: set[str] = set()
        for j, slot in enumerate(agent.slots):
            if not slot.id:
                raise InvalidScheduleInput(f"agents[{i}].slots[{j}].id", "must not be empty")
            if slot.id in slot_ids:
                raise InvalidScheduleInput(
                    f"agents[{i}].slots[{j}].id", f"duplicate slot id '{slot.id}' on agent '{agent.id}'"
                )
            slot_ids.add(slot.id)
        slots_by_agent[agent.id] = slot_ids
    return slots_by_agent


def _validate_requests(state: ClusterState, slots_by_agent: dict[str, set[str]]) -> None:
    seen: set[str] = set()
    # (agent, slot) -> the allocation whose placement claims it, to catch double-booked slots.
    claimed: dict[tuple[str, str], str] = {}
    for i, request in enumerate(state.requests):
        field = f"requests[{i}]"
        if not request.allocation_id:
            raise InvalidScheduleInput(f"{field}.allocation_id", "must not be empty")
        if request.allocation_id in seen:
            raise InvalidScheduleInput(
                f"{field}.allocation_id", f"duplicate allocation id '{request.allocation_id}'"
            )
        seen.add(request.allocation_id)
        if not request.resource_pool:
            raise InvalidScheduleInput(f"{field}.resource_pool", "must not be empty")
        if request.slots_needed < 0:
            raise InvalidScheduleInput(f"{field}.slots_needed", "must be >= 0")
        if request.priority < 0:
            raise InvalidScheduleInput(f"{field}.priority", "must be >= 0 (0 means the pool's default)")
        check_weight(field, request)
        validate_placements(field, request, slots_by_agent, claimed)


def check_weight(field: str, request: AllocationRequest) -> None:
    if not math.isfinite(request.weight) or request.weight < 0:
        raise InvalidScheduleInput(f"{field}.weight", "must be a finite number >= 0 (0 means 1)")


def validate_placements(
    field: str,
    request: AllocationRequest,
    slots_by_agent: dict[str, set[str]],
    claimed: dict[tuple[str, str], str],
) -> None:
    agents_named: set[str] = set()
    for j, placement in enumerate(request.placements):
        where = f"{field}.placements[{j}]"
        known_slots = slots_by_agent.get(placement.agent_id)
        if known_slots is None:
            raise InvalidScheduleInput(f"{where}.agent_id", f"unknown agent '{placement.agent_id}'")
        if placement.agent_id in agents_named:
            raise InvalidScheduleInput(
                f"{where}.agent_id", f"agent '{placement.agent_id}' appears in two placements"
            )
        agents_named.add(placement.agent_id)
        for k, slot_id in enumerate(placement.slot_ids):
            if slot_id not in known_slots:
                raise InvalidScheduleInput(
                    f"{where}.slot_ids[{k}]", f"unknown slot '{slot_id}' on agent '{placement.agent_id}'"
                )
            owner = claimed.get((placement.agent_id, slot_id))
            if owner == request.allocation_id:
                raise InvalidScheduleInput(f"{where}.slot_ids[{k}]", f"slot '{slot_id}' is listed twice")
            if owner is not None:
                raise InvalidScheduleInput(
                    f"{where}.slot_ids[{k}]",
                    f"slot '{slot_id}' on agent '{placement.agent_id}' is also placed for '{owner}'",
                )
            claimed[(placement.agent_id, slot_id)] = request.allocation_id
