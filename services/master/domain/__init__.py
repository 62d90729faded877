"""Master domain logic: experiments, trials, allocations, agents, auth. Knows nothing of gRPC."""
