"""Scheduler messages to domain data and back. Only the shape changes here, never the meaning."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from cairn.scheduler.v1 import scheduler_pb2 as pb
from services.scheduler.domain.errors import InvalidScheduleInput
from services.scheduler.domain.model import (
    Agent,
    AllocationRequest,
    ClusterState,
    Decision,
    FittingPolicy,
    GroupShare,
    Placement,
    PoolShares,
    ResourcePool,
    SchedulerType,
    ShareGroup,
    Slot,
)
from services.scheduler.domain.prediction import Forecast, PlayClock
from services.scheduler.domain.session import Changes, SessionAnswer

_POLICIES = {
    # Determined's default policy is best fit.
    pb.FITTING_POLICY_UNSPECIFIED: FittingPolicy.BEST,
    pb.FITTING_POLICY_BEST: FittingPolicy.BEST,
    pb.FITTING_POLICY_WORST: FittingPolicy.WORST,
}


_SCHEDULERS = {
    pb.SCHEDULER_TYPE_UNSPECIFIED: SchedulerType.PRIORITY,
    pb.SCHEDULER_TYPE_PRIORITY: SchedulerType.PRIORITY,
    pb.SCHEDULER_TYPE_FAIR_SHARE: SchedulerType.FAIR_SHARE,
}


def _nanoseconds(ts: Timestamp) -> int:
    return ts.seconds * 1_000_000_000 + ts.nanos


def _pool(index: int, msg: pb.ResourcePool) -> ResourcePool:
    policy = _POLICIES.get(msg.fitting_policy)
    if policy is None:
        raise InvalidScheduleInput(f"pools[{index}].fitting_policy", f"unknown value {msg.fitting_policy}")
    scheduler = _SCHEDULERS.get(msg.scheduler_type)
    if scheduler is None:
        raise InvalidScheduleInput(f"pools[{index}].scheduler_type", f"unknown value {msg.scheduler_type}")
    return ResourcePool(
        name=msg.name,
        fitting_policy=policy,
        preemption_enabled=msg.preemption_enabled,
        default_priority=msg.default_priority,
        scheduler_type=scheduler,
        workspaces=tuple(_group(g) for g in msg.workspaces),
        users=tuple(_group(g) for g in msg.users),
        protect_started_after_ns=_nanoseconds(msg.protect_started_after),
    )


def _group(msg: pb.ShareGroup) -> ShareGroup:
    return ShareGroup(
        key=msg.key,
        # 0 means 1 (proto3 cannot tell an unset weight from 0).
        weight=msg.weight or 1.0,
        recent_slot_seconds=msg.recent_slot_seconds,
        guaranteed_slots=msg.guaranteed_slots,
        max_slots=msg.max_slots,
        name=msg.name,
    )


def _agent(msg: pb.Agent) -> Agent:
    # HasField per slot costs a whole-state pass at a thousand agents ~8 ms: asked only of agents
    # whose slots carry a topology.
    slots = (
        tuple(
            Slot(
                id=s.id,
                enabled=s.enabled,
                allocation_id=s.allocation_id,
                nvlink_domain=s.nvlink_domain if s.HasField("nvlink_domain") else -1,
                numa_node=s.numa_node if s.HasField("numa_node") else -1,
            )
            for s in msg.slots
        )
        if msg.topology_known
        else tuple(Slot(id=s.id, enabled=s.enabled, allocation_id=s.allocation_id) for s in msg.slots)
    )
    return Agent(
        id=msg.id, resource_pool=msg.resource_pool, enabled=msg.enabled, draining=msg.draining, slots=slots
    )


def _placement(msg: pb.Placement) -> Placement:
    return Placement(agent_id=msg.agent_id, slot_ids=tuple(msg.slot_ids))


def _request(msg: pb.AllocationRequest) -> AllocationRequest:
    return AllocationRequest(
        allocation_id=msg.allocation_id,
        resource_pool=msg.resource_pool,
        slots_needed=msg.slots_needed,
        priority=msg.priority,
        job_submitted_at_ns=_nanoseconds(msg.job_submitted_at),
        requested_at_ns=_nanoseconds(msg.requested_at),
        job_id=msg.job_id,
        preemptible=msg.preemptible,
        single_agent=msg.single_agent,
        placements=tuple(_placement(p) for p in msg.placements),
        excluded_agents=frozenset(msg.excluded_agents),
        workspace=msg.workspace,
        user=msg.user,
        weight=msg.weight or 1.0,
        started_at_ns=_nanoseconds(msg.started_at),
    )


def state_from_proto(msg: pb.ScheduleRequest) -> ClusterState:
    return ClusterState(
        pools=tuple(_pool(i, p) for i, p in enumerate(msg.pools)),
        agents=tuple(_agent(a) for a in msg.agents),
        requests=tuple(_request(r) for r in msg.requests),
    )


def _placement_to_proto(placement: Placement) -> pb.Placement:
    return pb.Placement(agent_id=placement.agent_id, slot_ids=list(placement.slot_ids))


def _group_share(share: GroupShare) -> pb.GroupShare:
    return pb.GroupShare(
        key=share.key,
        name=share.name,
        nominal_slots=share.nominal_slots,
        entitled_slots=share.entitled_slots,
        held_slots=share.held_slots,
        wanted_slots=share.wanted_slots,
    )


def _shares(shares: PoolShares) -> pb.PoolShares:
    return pb.PoolShares(
        resource_pool=shares.resource_pool,
        workspaces=[_group_share(g) for g in shares.workspaces],
        users=[_group_share(g) for g in shares.users],
    )


def decision_to_proto(decision: Decision) -> pb.ScheduleResponse:
    return pb.ScheduleResponse(
        shares=[_shares(s) for s in decision.shares],
        assignments=[
            pb.Assignment(
                allocation_id=a.allocation_id, placements=[_placement_to_proto(p) for p in a.placements]
            )
            for a in decision.assignments
        ],
        preemptions=[
            pb.Preemption(allocation_id=p.allocation_id, for_allocation_id=p.for_allocation_id)
            for p in decision.preemptions
        ],
        waiting=[
            pb.Waiting(allocation_id=w.allocation_id, reason=w.reason, queue_position=w.queue_position)
            for w in decision.waiting
        ],
    )


def changes_from_proto(msg: pb.ScheduleChangesRequest) -> Changes:
    return Changes(
        pools=tuple(_pool(i, p) for i, p in enumerate(msg.pools)) if msg.pools else None,
        agents=tuple(_agent(a) for a in msg.agents),
        removed_agents=tuple(msg.removed_agents),
        requests=tuple(_request(r) for r in msg.requests),
        removed_requests=tuple(msg.removed_requests),
    )


def snapshot_from_proto(msg: pb.ScheduleChangesRequest) -> ClusterState:
    return ClusterState(
        pools=tuple(_pool(i, p) for i, p in enumerate(msg.pools)),
        agents=tuple(_agent(a) for a in msg.agents),
        requests=tuple(_request(r) for r in msg.requests),
    )


def answer_to_proto(answer: SessionAnswer) -> pb.ScheduleResponse:
    return decision_to_proto(Decision(answer.assignments, answer.preemptions, answer.waiting, answer.shares))


def clock_from_proto(msg: pb.PredictStartsRequest) -> PlayClock:
    return PlayClock(
        now_ns=_nanoseconds(msg.now) if msg.HasField("now") else 0,
        usage_half_life_s=dict(msg.usage_half_life_seconds),
        release_s=dict(msg.release_seconds),
    )


def forecast_to_proto(request: pb.PredictStartsRequest, forecast: Forecast) -> pb.PredictStartsResponse:
    """One prediction per waiting request of the state, in its order (-1: no start forecast)."""
    predictions = []
    for msg in request.state.requests:
        if msg.placements:
            continue
        start = forecast.starts.get(msg.allocation_id)
        predictions.append(
            pb.StartPrediction(
                allocation_id=msg.allocation_id,
                start_in_seconds=start[0] if start else -1.0,
                after_allocation_id=start[1] if start else "",
            )
        )
    return pb.PredictStartsResponse(predictions=predictions, truncated=forecast.truncated)
