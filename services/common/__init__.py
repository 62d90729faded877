"""What every Cairn service shares: server bootstrap, health, reflection, auth interceptors,
internal channels and logging setup — and nothing domain-specific."""
