"""A resource pool as the master is configured with it (Determined's `resource_pools` entries):
its scheduler's settings and, for dynamic agents, its provider."""

from __future__ import annotations

from dataclasses import dataclass

from services.master.configuration.provider import ProviderConfig


@dataclass(frozen=True)
class PoolSettings:
    name: str
    description: str = ""
    fitting_policy: str = "best"
    preemption_enabled: bool = False
    default_priority: int = 42
    # Dynamic agents: the pool's `provider:` block (provider.py); None: agents join it
    # by hand or through `cairn cluster up`.
    provider: ProviderConfig | None = None
