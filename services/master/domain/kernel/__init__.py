"""What every room of the master's domain stands on: the context and its units of work (context.py), the
states and their transition tables (states.py), errors, the clock, topics that wake waiting calls,
the background loops and how they ride out a database outage, the durable queue of deferred work,
and the protocols of the other services (ports.py). It imports no other room."""
