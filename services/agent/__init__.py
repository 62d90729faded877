"""Cairn's agent: one per machine. It holds one stream to the master (session/), keeps the
containers it was told to run (containers/) and runs them as local processes under a small
supervisor that survives agent restarts (runtime/)."""
