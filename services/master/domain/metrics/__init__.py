"""What trials report while they run: metric batches stored exactly once (intake.py), their
columns and summaries, samples for live charts, task logs, and the signals trial code waits for
(preemption, the searcher's operations)."""
