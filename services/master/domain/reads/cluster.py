"""Counts of what the cluster holds, for the /metrics gauges."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.master.domain.states import AllocationState
from services.master.store import models


@dataclass(frozen=True)
class ClusterCounts:
    experiments_by_state: list[tuple[str, int]]
    trials_by_state: list[tuple[str, int]]
    live_allocations_by_state: list[tuple[str, int]]
    agents: int
    slots: int


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
            models.Allocation.state, models.Allocation.state != AllocationState.TERMINATED
        ),
        agents=int(s.scalar(select(func.count()).select_from(models.Agent)) or 0),
        slots=int(s.scalar(select(func.count()).select_from(models.AgentSlot)) or 0),
    )
