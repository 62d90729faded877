"""A resource pool's `provider:` block (Determined's master.yaml), checked field by field: the
limits every provider shares, and the provider's own settings, which its adapter checks.

Determined's names and defaults: min_instances 0, max_instances 5, max_idle_agent_period and
max_agent_starting_period 20 minutes. `instance_slots` (the slots one instance's agent offers)
is explicit here: Determined derives it from a cloud instance type, which the local and docker
providers do not have; the aws provider takes it from the config too (its agents count GPUs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from services.common.errors import InvalidArgument
from services.master.configuration.durations import parse_duration

PROVIDER_TYPES = ("local", "docker", "aws")
# Bounds that keep a typo from launching a fleet or spinning a tight loop.
MAX_INSTANCES_CAP = 1000
MAX_INSTANCE_SLOTS = 1024
MIN_PERIOD_S = 1.0

_COMMON_KEYS = {
    "type",
    "min_instances",
    "max_instances",
    "instance_slots",
    "max_idle_agent_period",
    "max_agent_starting_period",
    "max_disconnected_period",
    "max_aux_containers_per_agent",
}


@dataclass(frozen=True)
class Limits:
    """A pool's provider settings that decide (Determined's names)."""

    min_instances: int
    max_instances: int
    instance_slots: int
    max_idle_agent_period_s: float
    max_agent_starting_period_s: float
    # An agent that was connected and has been away this long is given up (Determined: 10 min).
    max_disconnected_s: float = 600.0
    # Zero-slot tasks one instance takes (Determined's max_aux_containers_per_agent).
    max_aux_per_instance: int = 100


@dataclass(frozen=True)
class ProviderConfig:
    type: str
    limits: Limits
    # The provider's own settings (image, instance type, agent flags...), checked by its adapter.
    options: Mapping[str, Any] = field(default_factory=dict)


def _whole(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(f"{where}: {value!r} must be a whole number from {low} to {high}")
    return value


def _period(block: Mapping[str, Any], key: str, where: str, default: str) -> float:
    seconds = parse_duration(block.get(key, default), f"{where}.{key}")
    if seconds < MIN_PERIOD_S:
        raise InvalidArgument(f"{where}.{key}: at least {MIN_PERIOD_S:g} s")
    return seconds


def parse_provider(block: Any, where: str) -> ProviderConfig:
    """The provider at `where` (e.g. "resource_pools[1].provider"), or InvalidArgument naming the
    field that is wrong."""
    if not isinstance(block, Mapping):
        raise InvalidArgument(f"{where}: must be a mapping with a type ({', '.join(PROVIDER_TYPES)})")
    kind = block.get("type")
    if kind not in PROVIDER_TYPES:
        raise InvalidArgument(f"{where}.type: {kind!r} is not one of {', '.join(PROVIDER_TYPES)}")
    min_instances = _whole(block.get("min_instances", 0), f"{where}.min_instances", 0, MAX_INSTANCES_CAP)
    max_instances = _whole(block.get("max_instances", 5), f"{where}.max_instances", 0, MAX_INSTANCES_CAP)
    if min_instances > max_instances:
        raise InvalidArgument(
            f"{where}.min_instances: {min_instances} is more than max_instances ({max_instances})"
        )
    limits = Limits(
        min_instances=min_instances,
        max_instances=max_instances,
        instance_slots=_whole(
            block.get("instance_slots", 1), f"{where}.instance_slots", 0, MAX_INSTANCE_SLOTS
        ),
        max_idle_agent_period_s=_period(block, "max_idle_agent_period", where, "20m"),
        max_agent_starting_period_s=_period(block, "max_agent_starting_period", where, "20m"),
        max_disconnected_s=_period(block, "max_disconnected_period", where, "10m"),
        max_aux_per_instance=_whole(
            block.get("max_aux_containers_per_agent", 100), f"{where}.max_aux_containers_per_agent", 1, 10_000
        ),
    )
    options = {k: v for k, v in block.items() if k not in _COMMON_KEYS}
    return ProviderConfig(type=str(kind), limits=limits, options=options)
