"""Tasks that are not trials (commands, notebooks, shells, TensorBoards, generic tasks): their
lifecycle on top of allocations, and each kind's own rules."""
