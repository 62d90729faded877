"""The benchmark's shape, shared by the search runs and by the tools that only read their records
(replay, report): how long a full training is and the rungs every system uses. Kept apart from
task.py so that those tools, and their tests, need no PyTorch."""

from __future__ import annotations

# One full training; the unit every budget in the benchmark is counted in.
MAX_EPOCHS = 27
# ASHA's reduction factor for every system: rungs at 1, 3, 9 and 27 epochs.
REDUCTION_FACTOR = 3
NUM_RUNGS = 4
