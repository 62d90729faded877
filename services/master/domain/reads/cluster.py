"""Counts of what the cluster holds, for the /metrics gauges."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.master.domain.kernel.states import LIVE_ALLOCATION_STATES, AllocationState
from services.master.store import models


@dataclass(frozen=True)
class ClusterCounts:
    experiments_by_state: list[tuple[str, int]]
    trials_by_state: list[tuple[str, int]]
    live_allocations_by_state: list[tuple[str, int]]
    agents: int
    slots: int
    # Slots out of service because their device failed (agents.py: slot health).
    slots_unhealthy: int


def cluster_counts(s: Session) -> ClusterCounts:
    def by_state(column: object, *where: object) -> list[tuple[str, int]]:
        query = select(column, func.count()).group_by(column)  # type: ignore[call-overload]
        for condition in where:
            query = query.where(condition)
        return [(str(state), int(n)) for state, n in s.execute(query).all()]

    return ClusterCounts(
        experiments_by_state=by_state(models.Experiment.state),
        trials_by_state=by_state(models.Trial.state),
        live_allocations_by_state=by_state(
            models.Allocation.state, models.Allocation.state.in_(LIVE_ALLOCATION_STATES)
        ),
        agents=int(s.scalar(select(func.count()).select_from(models.Agent)) or 0),
        slots=int(s.scalar(select(func.count()).select_from(models.AgentSlot)) or 0),
        slots_unhealthy=int(
            s.scalar(
                select(func.count()).select_from(models.AgentSlot).where(models.AgentSlot.unhealthy != "")
            )
            or 0
        ),
    )


@dataclass(frozen=True)
class QueueCounts:
    # Allocations waiting for slots, per resource pool.
    pending_by_pool: list[tuple[str, int]]
    # Searcher events written but not yet applied, and the age of the oldest (0 when none waits).
    searcher_events: int
    searcher_lag_s: float


def queue_counts(s: Session, now: datetime) -> QueueCounts:
    pending = s.execute(
        select(models.Allocation.resource_pool, func.count())
        .where(models.Allocation.state == AllocationState.PENDING)
        .group_by(models.Allocation.resource_pool)
    ).all()
    events, oldest = s.execute(
        select(func.count(), func.min(models.SearcherEvent.created_at)).select_from(models.SearcherEvent)
    ).one()
    lag = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
    return QueueCounts(
        pending_by_pool=[(str(pool), int(n)) for pool, n in pending],
        searcher_events=int(events or 0),
        searcher_lag_s=lag,
    )
