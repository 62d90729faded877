"""The containers an agent runs: their states, what is persisted about them, their environment,
and the buffer of events waiting for the master's acknowledgement. Knows nothing of gRPC."""
