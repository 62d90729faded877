"""A pool's queue order, written once: the scheduler places by it, the master numbers its waiting
requests by it, and the job listing shows jobs in it.

Smaller priority numbers first (Determined's scale, 1..99); within a priority the older job, then
the older request, then an id, so that no two entries ever compare equal. Determined also orders by
a job's queue position, which the master folds into the job's submission time."""

from __future__ import annotations

# Determined's `scheduler.priority.default_priority`: the priority of work that sets none and runs
# in a pool that sets no default. Smaller numbers are more important (1..99).
DETERMINED_DEFAULT_PRIORITY = 42

QueueKey = tuple[int, int, int, str]


def effective_priority(priority: int | None, pool_default: int | None) -> int:
    """A job's priority in its pool: its own, else the pool's default, else Determined's."""
    return priority or pool_default or DETERMINED_DEFAULT_PRIORITY


def queue_key(priority: int, job_submitted_ns: int, requested_ns: int, tie: str) -> QueueKey:
    """Where an entry of effective `priority` stands in its pool's queue; sort ascending."""
    return (priority, job_submitted_ns, requested_ns, tie)
