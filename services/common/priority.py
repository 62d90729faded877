"""Determined's scheduling priority scale, shared by the scheduler and the master's job queue."""

# Determined's `scheduler.priority.default_priority`: the priority of work that sets none and runs
# in a pool that sets no default. Smaller numbers are more important (1..99).
DETERMINED_DEFAULT_PRIORITY = 42
