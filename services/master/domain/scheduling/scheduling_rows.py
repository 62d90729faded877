"""What a scheduling pass reads, as the scheduler takes it: allocation rows as columns, agents
with their slots, pools; shared by the whole-state pass (scheduling.build_request) and the
session's incremental one (scheduling_view.py)."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from cairn.scheduler.v1 import scheduler_pb2 as pb
from services.master.domain.config.schema import schema_default
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.states import (
    LIVE_ALLOCATION,
    PLACED_ALLOCATION,
    PREEMPTIBLE_KINDS,
    RunState,
)
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.reads.jobs import experiment_job_id
from services.master.domain.scheduling.fair_share_inputs import guarantees_set, user_key, workspace_key
from services.master.store import models

FITTING = {"best": pb.FITTING_POLICY_BEST, "worst": pb.FITTING_POLICY_WORST}
SCHEDULER_TYPES = {"priority": pb.SCHEDULER_TYPE_PRIORITY, "fair_share": pb.SCHEDULER_TYPE_FAIR_SHARE}
# Experiments whose trials are stopping for good: their pending allocations are not offered.
STOPPED_EXPERIMENT = frozenset({RunState.STOPPING_CANCELED, RunState.STOPPING_KILLED})


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ts(value: datetime) -> Timestamp:
    """An aware UTC datetime (as the store gives them) as a Timestamp, by arithmetic: a pass
    converts two per allocation."""
    delta = (value if value.tzinfo is not None else value.replace(tzinfo=UTC)) - _EPOCH
    return Timestamp(seconds=delta.days * 86_400 + delta.seconds, nanos=delta.microseconds * 1000)


def over_max_slots(rows: list[tuple[Any, int | None, int | None]]) -> dict[str, str]:
    """Pending allocations an experiment's max_slots holds back, with why: in request order, a
    pending allocation is offered only while the experiment's placed slots plus those offered
    before it leave room for it."""
    held: dict[int | None, int] = {}
    caps: dict[int | None, int | None] = {}
    for alloc, experiment, cap in rows:
        if experiment is None:
            continue  # not a trial: no experiment's max_slots applies
        caps[experiment] = cap
        if alloc.state in PLACED_ALLOCATION:
            held[experiment] = held.get(experiment, 0) + alloc.slots
    capped: dict[str, str] = {}
    pending = sorted((r for r in rows if r[0].state == A.PENDING), key=lambda r: (r[0].requested_at, r[0].id))
    for alloc, experiment, _ in pending:
        cap = caps.get(experiment) if experiment is not None else None
        if cap is None:
            continue
        if held.get(experiment, 0) + alloc.slots > cap:
            capped[alloc.id] = (
                f"experiment {experiment} holds {held.get(experiment, 0)} of its max_slots {cap}; "
                f"this allocation needs {alloc.slots} more"
            )
        else:
            held[experiment] = held.get(experiment, 0) + alloc.slots
    return capped


# The columns a pass reads of each allocation, whatever its task's kind: one queue, one scheduler.
# A trial's job is its experiment; any other task is its own job. Columns, not objects: a pass at
# 10,000 pending allocations reads rows. Built once, with the ids as parameters: building and keying
# it anew for each read was a tenth of what a pass read cost.
_ALLOCATION_ROWS = (
    select(
        models.Allocation.id,
        models.Allocation.state,
        models.Allocation.resource_pool,
        models.Allocation.slots,
        models.Allocation.priority,
        models.Allocation.requested_at,
        models.Allocation.port_offset,
        models.Allocation.releasing,
        func.coalesce(models.Experiment.start_time, models.Task.start_time).label("submitted_at"),
        models.Task.kind,
        models.Task.job_id,
        models.Experiment.id.label("experiment_id"),
        models.Experiment.state.label("experiment_state"),
        models.Trial.excluded_agents,
        models.Task.workspace_id,
        models.Task.owner_id,
        models.Allocation.start_time,
    )
    .join(models.Task, models.Task.id == models.Allocation.task_id)
    .outerjoin(models.Experiment, models.Experiment.id == models.Task.experiment_id)
    .outerjoin(models.Trial, models.Trial.id == models.Allocation.trial_id)
)
_LIVE = models.Allocation.state.in_(list(LIVE_ALLOCATION))
_LIVE_ROWS = _ALLOCATION_ROWS.where(_LIVE)
_ROWS_BY_ID = _ALLOCATION_ROWS.where(models.Allocation.id.in_(bindparam("ids", expanding=True)))
_LIVE_ROWS_OF_EXPERIMENTS = _ALLOCATION_ROWS.where(
    models.Task.experiment_id.in_(bindparam("experiment_ids", expanding=True)), _LIVE
)


# A row of _ALLOCATION_ROWS changed in memory (placed_row): the same fields, by the same names.
_ChangedRow = namedtuple("_ChangedRow", list(_ALLOCATION_ROWS.selected_columns.keys()))  # type: ignore[misc]


def placed_row(row: Any, port_offset: int | None) -> Any:
    """`row` of a pending allocation as it reads once a pass placed it (placement.assign: ASSIGNED,
    its port block; nothing else a pass reads changes), for the pass's view to keep without
    reading it back."""
    values = row._asdict()
    values["state"] = A.ASSIGNED
    values["port_offset"] = port_offset
    return _ChangedRow(**values)


def allocation_rows(s: Session) -> list[Any]:
    """The live allocations' rows, as a pass reads them."""
    return list(s.execute(_LIVE_ROWS))


def allocation_rows_by_id(s: Session, ids: Iterable[str]) -> list[Any]:
    """The rows of the allocations `ids` (those that exist), live or not."""
    return list(s.execute(_ROWS_BY_ID, {"ids": list(ids)}))


def live_allocation_rows_of(s: Session, experiment_ids: Iterable[int]) -> list[Any]:
    """The rows of the live allocations of the experiments' trials."""
    return list(s.execute(_LIVE_ROWS_OF_EXPERIMENTS, {"experiment_ids": list(experiment_ids)}))


class JobLimits(NamedTuple):
    """What an experiment's `resources` say of its trials' allocations as a job."""

    max_slots: int | None
    # Its weight among its owner's jobs, in a fair-share pool.
    weight: float


# The two fields of each config, extracted by the database: a snapshot reads every live
# experiment's limits, and decoding each whole config for them cost ~60 us an experiment (a
# minute of a thousand snapshots at a thousand experiments). A field a config lacks (stored
# before it existed) reads as NULL: the schema's default, as config_view reads it.
_LIMITS_OF = select(
    models.Experiment.id,
    models.Experiment.config[("resources", "max_slots")].as_integer(),
    models.Experiment.config[("resources", "weight")].as_float(),
).where(models.Experiment.id.in_(bindparam("ids", expanding=True)))
_DEFAULT_MAX_SLOTS = schema_default("resources", "max_slots")
_DEFAULT_WEIGHT = float(schema_default("resources", "weight"))


def limits_of(s: Session, experiment_ids: set[int]) -> dict[int, JobLimits]:
    """The JobLimits of the experiments (config_view's max_slots and weight)."""
    return {
        eid: JobLimits(
            int(max_slots) if max_slots is not None else _DEFAULT_MAX_SLOTS,
            float(weight) if weight is not None else _DEFAULT_WEIGHT,
        )
        for eid, max_slots, weight in s.execute(_LIMITS_OF, {"ids": list(experiment_ids)})
    }


def pools_read_started_at(pools: list[pb.ResourcePool]) -> bool:
    """Whether the scheduler reads when placed work began to run in any of `pools`: a fair-share
    pool reclaims the oldest borrowed slots first and protects young work, a pool with quotas
    preempts the youngest first. A priority pool without quotas never reads it (nor does a pool
    the master does not list: the scheduler orders it as Determined's default priority pool)."""
    return any(
        pool.scheduler_type == pb.SCHEDULER_TYPE_FAIR_SHARE
        or any(g.max_slots > 0 or g.guaranteed_slots > 0 for g in (*pool.workspaces, *pool.users))
        for pool in pools
    )


def pool_messages(
    ctx: MasterContext,
    groups: dict[str, tuple[list[pb.ShareGroup], list[pb.ShareGroup]]] | None = None,
    now: datetime | None = None,
) -> list[pb.ResourcePool]:
    """The pools as the scheduler takes them, each with its groups (fair_share_inputs.share_groups)
    and, as of `now`, where anything is reclaimed (a fair-share pool, a pool with guarantees), the
    placements too young to reclaim."""
    messages = []
    reclaiming = guarantees_set(groups or {})
    for pool in ctx.settings.pools:
        workspaces, users = (groups or {}).get(pool.name, ([], []))
        messages.append(
            pb.ResourcePool(
                name=pool.name,
                fitting_policy=FITTING.get(pool.fitting_policy, pb.FITTING_POLICY_BEST),
                preemption_enabled=pool.preemption_enabled,
                default_priority=pool.default_priority,
                scheduler_type=SCHEDULER_TYPES[pool.scheduler_type],
                workspaces=workspaces,
                users=users,
            )
        )
        reclaims = pool.scheduler_type == "fair_share" or pool.name in reclaiming
        if reclaims and now is not None and pool.min_run_before_reclaim_s > 0:
            protect = now - timedelta(seconds=pool.min_run_before_reclaim_s)
            messages[-1].protect_started_after.CopyFrom(ts(protect))
    return messages


def request_message(
    row: Any,
    placements: list[dict[str, Any]] | None,
    submitted: dict[datetime, Timestamp],
    weight: float = 1.0,
    started: bool = True,
) -> pb.AllocationRequest:
    """A row of allocation_rows as the scheduler takes it; `submitted` shares a job's time among
    its allocations; `weight`, its job's (an experiment's `resources.weight`). A placed one's
    started_at is when it began to run, or its requested_at before then and always where no pool
    reads it (not `started`: pools_read_started_at), so that its start changes nothing sent."""
    experiment_id = row.experiment_id
    req = pb.AllocationRequest(
        allocation_id=row.id,
        resource_pool=row.resource_pool,
        slots_needed=row.slots,
        priority=row.priority or 0,
        job_submitted_at=submitted.get(row.submitted_at)
        or submitted.setdefault(row.submitted_at, ts(row.submitted_at)),
        requested_at=ts(row.requested_at),
        job_id=experiment_job_id(experiment_id) if experiment_id is not None else row.job_id,
        preemptible=row.kind in PREEMPTIBLE_KINDS,
        # A trial's `exclude_node` log policy matched there (trials/log_policies.py).
        excluded_agents=sorted(row.excluded_agents or []),
        # Whose work it is, as fair share divides a pool (fair_share_inputs.py).
        workspace=workspace_key(row.workspace_id),
        user=user_key(row.workspace_id, row.owner_id),
        # 0 means 1: the default weight costs the message nothing.
        weight=weight if weight != 1.0 else 0.0,
    )
    if row.state in PLACED_ALLOCATION:
        req.started_at.CopyFrom(ts((row.start_time if started else None) or row.requested_at))
        for placement in placements or []:
            slot_ids = [str(x) for x in placement.get("slot_ids", [])]
            req.placements.append(pb.Placement(agent_id=placement["agent_id"], slot_ids=slot_ids))
    return req


def offered(row: Any) -> bool:
    """Whether a live allocation goes to the scheduler at all: a canceled or killed experiment's
    trials are being stopped (in batches, for a big one), and none of its pending allocations is
    placed meanwhile; an allocation whose task said it is exiting (releasing) no longer holds its
    slots in the scheduler's eyes (nor against its experiment's max_slots): the next allocation
    placed there starts once its container has ended (placement.assign)."""
    if row.releasing and row.state in PLACED_ALLOCATION:
        return False
    return not (row.state == A.PENDING and row.experiment_state in STOPPED_EXPERIMENT)


# The reads of agent_messages, built once (building a statement of columns anew for each pass cost
# more than running it, at a small cluster). Columns, not objects: a snapshot at a thousand agents
# reads eight thousand slots.
_AGENTS = select(
    models.Agent.id, models.Agent.resource_pool, models.Agent.enabled, models.Agent.draining
).order_by(models.Agent.id)
# In the order of the table's key, both reads: ordered by agent alone, a whole read and a read of
# some agents listed an agent's slots in the orders of their plans (a sort of the heap, an index),
# so an agent the view had refreshed compared unequal with a whole read of it (the tests' check,
# seen at 1,000 agents on PostgreSQL).
_SLOTS = select(
    models.AgentSlot.agent_id,
    models.AgentSlot.slot_id,
    models.AgentSlot.enabled,
    models.AgentSlot.draining,
    models.AgentSlot.nvlink_domain,
    models.AgentSlot.numa_node,
).order_by(models.AgentSlot.agent_id, models.AgentSlot.slot_id)
_AGENTS_BY_ID = _AGENTS.where(models.Agent.id.in_(bindparam("ids", expanding=True)))
_SLOTS_BY_AGENT = _SLOTS.where(models.AgentSlot.agent_id.in_(bindparam("ids", expanding=True)))


def agent_messages(
    s: Session,
    placeable: frozenset[str],
    slot_owner: dict[tuple[str, str], str] | None,
    agent_ids: Any = None,
) -> list[pb.Agent]:
    """The agents (all, or `agent_ids`) as the scheduler takes them; with `slot_owner`, each slot
    names the allocation placed on it."""
    if agent_ids is None:
        agents = list(s.execute(_AGENTS))
        slots = s.execute(_SLOTS)
    else:
        ids = {"ids": list(agent_ids)}
        agents = list(s.execute(_AGENTS_BY_ID, ids))
        slots = s.execute(_SLOTS_BY_AGENT, ids)
    by_agent: dict[str, list[Any]] = {}
    for slot in slots:
        by_agent.setdefault(slot.agent_id, []).append(slot)
    owners = slot_owner or {}
    # Connected and not shutting down: an agent that is away, or stopping, keeps its running work
    # but gets nothing new.
    return [
        pb.Agent(
            id=agent.id,
            resource_pool=agent.resource_pool,
            enabled=agent.enabled and agent.id in placeable,
            draining=agent.draining,
            slots=[
                pb.Slot(
                    id=slot.slot_id,
                    enabled=slot.enabled and not slot.draining,
                    allocation_id=owners.get((agent.id, slot.slot_id), ""),
                    nvlink_domain=slot.nvlink_domain if slot.nvlink_domain >= 0 else None,
                    numa_node=slot.numa_node if slot.numa_node >= 0 else None,
                )
                for slot in by_agent.get(agent.id, [])
            ],
            topology_known=any(
                slot.nvlink_domain >= 0 or slot.numa_node >= 0 for slot in by_agent.get(agent.id, [])
            ),
        )
        for agent in agents
    ]
