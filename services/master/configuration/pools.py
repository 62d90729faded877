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
    # "priority" or "fair_share" (Determined's `scheduler.type`; its deprecated round_robin runs as
    # priority).
    scheduler_type: str = "priority"
    # Fair share: how fast past usage is forgotten; a slot-second used this long ago counts half.
    usage_half_life_s: float = 3600.0
    # Fair share: how long work runs before its slots may be reclaimed for another's share.
    min_run_before_reclaim_s: float = 10.0
    # Dynamic agents: the pool's `provider:` block (provider.py); None: agents join it
    # by hand or through `cairn cluster up`.
    provider: ProviderConfig | None = None
