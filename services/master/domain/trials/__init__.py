"""Trials: their lifecycle from the searcher's create to their end, the task each trial runs as,
hyperparameters as trial code sees them, and the outbox of events on their way to the searcher."""
