"""The queue order of a pool: priority, then first come first served, then a total tie-break."""

from __future__ import annotations

from services.scheduler.domain.model import AllocationRequest, ResourcePool

QueueKey = tuple[int, int, int, str]


def effective_priority(request: AllocationRequest, pool: ResourcePool) -> int:
    return request.priority or pool.effective_default_priority


def queue_key(request: AllocationRequest, pool: ResourcePool) -> QueueKey:
    """Smaller priority number first; within a priority the older job, then the older request,
    then the allocation id so that no two requests ever compare equal (Determined also orders by
    a job's queue position, which the master folds into `job_submitted_at`)."""
    return (
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
