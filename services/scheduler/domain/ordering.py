"""The queue order of a pool (services/common/queue_order.py) over the scheduler's own requests."""

from __future__ import annotations

from services.common import queue_order
from services.common.queue_order import QueueKey
from services.scheduler.domain.model import AllocationRequest, ResourcePool

__all__ = ["QueueKey", "by_priority_level", "effective_priority", "queue_key"]


def effective_priority(request: AllocationRequest, pool: ResourcePool) -> int:
    return queue_order.effective_priority(request.priority, pool.default_priority)


def queue_key(request: AllocationRequest, pool: ResourcePool) -> QueueKey:
    return queue_order.queue_key(
        effective_priority(request, pool),
        request.job_submitted_at_ns,
        request.requested_at_ns,
        request.allocation_id,
    )


def by_priority_level(
    requests: list[AllocationRequest], pool: ResourcePool
) -> dict[int, list[AllocationRequest]]:
    """Requests grouped by priority, each group in queue order, groups highest priority first."""
    levels: dict[int, list[AllocationRequest]] = {}
    for request in sorted(requests, key=lambda r: queue_key(r, pool)):
        levels.setdefault(effective_priority(request, pool), []).append(request)
    return dict(sorted(levels.items()))
