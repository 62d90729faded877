"""Agents, slots and resource pools."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc

from cairn.api.v1 import agent_pb2 as apb
from cairn.api.v1 import common_pb2
from cairn.api.v1 import resourcepool_pb2 as rpb
from services.master.configuration.pools import PoolSettings
from services.master.domain.identity import access
from services.master.domain.identity.permissions import Permission
from services.master.domain.kernel.errors import NotFound
from services.master.domain.kernel.paging import page_of
from services.master.domain.kernel.states import AllocationState
from services.master.domain.reads.agents import agents_with_slots, live_allocations_by_pool
from services.master.domain.reads.provisioning import pool_provisioning
from services.master.domain.scheduling import agents as agent_registry
from services.master.domain.workspaces import pool_bindings
from services.master.servicers.api import convert
from services.master.servicers.api.base import ServicerBase
from services.master.servicers.errors import rpc

POLICIES = {
    "best": rpb.ResourcePool.FITTING_POLICY_BEST,
    "worst": rpb.ResourcePool.FITTING_POLICY_WORST,
}


def _with_provider(pool: rpb.ResourcePool, settings: PoolSettings) -> rpb.ResourcePool:
    """Determined's own fields for a pool whose agents are provisioned, filled in."""
    config = settings.provider
    if config is not None:
        limits = config.limits
        pool.min_agents = limits.min_instances
        pool.max_agents = limits.max_instances
        pool.max_idle_agent_period = limits.max_idle_agent_period_s
        pool.max_agent_starting_period = limits.max_agent_starting_period_s
        if config.type == "aws":
            pool.type = rpb.ResourcePool.RESOURCE_POOL_TYPE_AWS
    return pool


class AgentsApi(ServicerBase):
    def _agents(
        self, agent_id: str | None = None, *, include_slots: bool = True, include_containers: bool = True
    ) -> list[apb.Agent]:
        heard = self.ctx.hub.last_heard()
        with self.ctx.db.read() as s:
            found = agents_with_slots(s, agent_id)
        return [
            convert.agent(
                a,
                found.slots.get(a.id, []),
                found.holders,
                connected=a.id in heard,
                last_heard=datetime.fromtimestamp(heard[a.id], UTC) if a.id in heard else None,
                include_slots=include_slots,
                include_containers=include_containers,
            )
            for a in found.agents
        ]

    def _one(self, agent_id: str) -> apb.Agent:
        found = self._agents(agent_id)
        if not found:
            raise NotFound(f"agent {agent_id} not found")
        return found[0]

    def _admin(self, context: grpc.ServicerContext) -> None:
        access.check_cluster(
            self.user(context), Permission.UPDATE_AGENTS, "enable or disable agents and slots"
        )

    @rpc
    def GetAgents(
        self, request: apb.GetAgentsRequest, context: grpc.ServicerContext
    ) -> apb.GetAgentsResponse:
        agents = self._agents(
            include_slots=not request.exclude_slots, include_containers=not request.exclude_containers
        )
        if request.sort_by == apb.GetAgentsRequest.SORT_BY_TIME:
            agents.sort(key=lambda a: a.registered_time.ToDatetime())
        if request.order_by == common_pb2.ORDER_BY_DESC:
            agents.reverse()
        page = page_of(len(agents), request.offset, request.limit)
        return apb.GetAgentsResponse(
            agents=agents[page.start : page.end], pagination=convert.pagination(page)
        )

    @rpc
    def GetAgent(self, request: apb.GetAgentRequest, context: grpc.ServicerContext) -> apb.GetAgentResponse:
        return apb.GetAgentResponse(agent=self._one(request.agent_id))

    @rpc
    def GetSlots(self, request: apb.GetSlotsRequest, context: grpc.ServicerContext) -> apb.GetSlotsResponse:
        agent = self._one(request.agent_id)
        return apb.GetSlotsResponse(slots=list(agent.slots.values()))

    @rpc
    def GetSlot(self, request: apb.GetSlotRequest, context: grpc.ServicerContext) -> apb.GetSlotResponse:
        agent = self._one(request.agent_id)
        if request.slot_id not in agent.slots:
            raise NotFound(f"slot {request.slot_id} of agent {request.agent_id} not found")
        return apb.GetSlotResponse(slot=agent.slots[request.slot_id])

    @rpc
    def EnableAgent(
        self, request: apb.EnableAgentRequest, context: grpc.ServicerContext
    ) -> apb.EnableAgentResponse:
        self._admin(context)
        agent_registry.set_enabled(self.ctx, request.agent_id, True)
        return apb.EnableAgentResponse(agent=self._one(request.agent_id))

    @rpc
    def DisableAgent(
        self, request: apb.DisableAgentRequest, context: grpc.ServicerContext
    ) -> apb.DisableAgentResponse:
        self._admin(context)
        agent_registry.set_enabled(self.ctx, request.agent_id, False, drain=request.drain)
        return apb.DisableAgentResponse(agent=self._one(request.agent_id))

    @rpc
    def EnableSlot(
        self, request: apb.EnableSlotRequest, context: grpc.ServicerContext
    ) -> apb.EnableSlotResponse:
        self._admin(context)
        agent_registry.set_slot_enabled(self.ctx, request.agent_id, request.slot_id, True)
        return apb.EnableSlotResponse(slot=self._one(request.agent_id).slots[request.slot_id])

    @rpc
    def DisableSlot(
        self, request: apb.DisableSlotRequest, context: grpc.ServicerContext
    ) -> apb.DisableSlotResponse:
        self._admin(context)
        agent_registry.set_slot_enabled(
            self.ctx, request.agent_id, request.slot_id, False, drain=request.drain
        )
        return apb.DisableSlotResponse(slot=self._one(request.agent_id).slots[request.slot_id])

    def _provisioner(self, settings: PoolSettings) -> rpb.ProvisionerStatus | None:
        config = settings.provider
        if config is None:
            return None
        with self.ctx.db.read() as s:
            view = pool_provisioning(s, settings.name)
        limits = config.limits
        return rpb.ProvisionerStatus(
            provider=config.type,
            min_instances=limits.min_instances,
            max_instances=limits.max_instances,
            instance_slots=limits.instance_slots,
            max_idle_agent_period_s=limits.max_idle_agent_period_s,
            max_agent_starting_period_s=limits.max_agent_starting_period_s,
            instances=[
                rpb.ProvisionedInstance(
                    id=i.id,
                    phase=i.phase,
                    launched_at=convert.ts(i.launched_at),
                    connected_at=convert.ts(i.connected_at),
                    idle_since=convert.ts(i.idle_since),
                    drain_reason=i.drain_reason or "",
                    reason=i.reason,
                )
                for i in view.instances
            ],
            recent_events=[
                rpb.ProvisionerEvent(
                    at=convert.ts(e.at), action=e.action, instance_id=e.instance_id or "", message=e.message
                )
                for e in view.events
            ],
            last_error=view.last_error,
        )

    @rpc
    def GetResourcePools(
        self, request: rpb.GetResourcePoolsRequest, context: grpc.ServicerContext
    ) -> rpb.GetResourcePoolsResponse:
        agents = self._agents(include_containers=False)
        waiting = self.deps.waiting.reasons
        pools = []
        with self.ctx.db.read() as s:
            live = live_allocations_by_pool(s)
        for settings in self.ctx.settings.pools:
            members = [a for a in agents if settings.name in a.resource_pools]
            slots = [slot for a in members for slot in a.slots.values()]
            used = sum(1 for slot in slots if slot.HasField("container"))
            slot_types = {slot.device.type for slot in slots}
            pool_allocs = live.get(settings.name, [])
            pools.append(
                _with_provider(
                    rpb.ResourcePool(
                        name=settings.name,
                        description=settings.description,
                        type=rpb.ResourcePool.RESOURCE_POOL_TYPE_STATIC,
                        num_agents=len(members),
                        slots_available=sum(1 for slot in slots if slot.enabled),
                        slots_used=used,
                        slot_type=slot_types.pop() if len(slot_types) == 1 else common_pb2.TYPE_UNSPECIFIED,
                        aux_container_capacity=100 * len(members),
                        default_compute_pool=settings.name == self.ctx.settings.default_pool,
                        default_aux_pool=settings.name
                        == (self.ctx.settings.default_aux_pool or self.ctx.settings.default_pool),
                        preemptible=settings.preemption_enabled,
                        slots_per_agent=max((len(a.slots) for a in members), default=0),
                        aux_container_capacity_per_agent=100,
                        scheduler_type=(
                            rpb.ResourcePool.SCHEDULER_TYPE_FAIR_SHARE
                            if settings.scheduler_type == "fair_share"
                            else rpb.ResourcePool.SCHEDULER_TYPE_PRIORITY
                        ),
                        scheduler_fitting_policy=POLICIES.get(
                            settings.fitting_policy, rpb.ResourcePool.FITTING_POLICY_BEST
                        ),
                        location="local",
                        cluster_name=self.ctx.settings.cluster_name,
                        stats=rpb.QueueStats(
                            queued_count=sum(1 for a in pool_allocs if a.id in waiting),
                            scheduled_count=sum(1 for a in pool_allocs if a.state != AllocationState.PENDING),
                        ),
                        default_priority=settings.default_priority,
                        preemption_enabled=settings.preemption_enabled,
                        provisioner=self._provisioner(settings),
                        # Determined's clients require the key (bindings raise KeyError without it).
                        details=rpb.ResourcePoolDetail(
                            priority_scheduler=rpb.ResourcePoolPrioritySchedulerDetail(
                                preemption=settings.preemption_enabled,
                                default_priority=settings.default_priority,
                            )
                        ),
                    ),
                    settings,
                )
            )
        if request.unbound:
            # Determined's `unbound`: only the pools shared by the whole cluster.
            shared = pool_bindings.unbound_pool_names(self.ctx)
            pools = [pool for pool in pools if pool.name in shared]
        page = page_of(len(pools), request.offset, request.limit)
        return rpb.GetResourcePoolsResponse(
            resource_pools=pools[page.start : page.end], pagination=convert.pagination(page)
        )
