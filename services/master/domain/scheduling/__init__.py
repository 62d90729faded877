"""Where allocations run: the connected agents and their liveness, the scheduling pass that reads
the queue (scheduling_rows.py, scheduling_view.py), asks the scheduler service and applies its
answer, and the gang rule pools are measured by (shapes.py)."""
