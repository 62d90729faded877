"""The master's config file (`--config-file`, $CAIRN_MASTER_CONFIG): the part of Determined's
master.yaml that shapes the cluster, its resource pools, read once at start.

    resource_pools:
      - pool_name: default
        description: CPU agents
        max_aux_containers_per_agent: 100
        scheduler: {type: priority, fitting_policy: best, priority: {preemption: true, default_priority: 42}}
        provider: {type: local, min_instances: 0, max_instances: 3, max_idle_agent_period: 5m}
    default_compute_resource_pool: default
    default_aux_resource_pool: default
    feature_switches: [streaming_updates]
    oidc: {enabled: true, idp_sso_url: ..., client_id: ...}   # single sign-on (oidc.py)

Every key is checked; a wrong one stops the master with its path named, rather than a cluster that
silently runs with a default. Determined keys that do not apply to Cairn's scheduler are accepted
and ignored (listed below), so a Determined master.yaml's pools read unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from services.common.errors import InvalidArgument
from services.master.configuration.durations import parse_duration
from services.master.configuration.feature_switches import parse_feature_switches
from services.master.configuration.oidc import OidcSettings, parse_oidc
from services.master.configuration.pools import PoolSettings
from services.master.configuration.provider import parse_provider

MAX_CONFIG_BYTES = 1024 * 1024
MAX_POOLS = 100
_POOL_KEYS = {"pool_name", "description", "provider", "scheduler", "max_aux_containers_per_agent"}
# Determined pool keys with no effect in Cairn (its agents reattach always; task defaults are per
# cluster): accepted so that a Determined master.yaml's pools load unchanged.
_IGNORED_POOL_KEYS = {
    "agent_reattach_enabled",
    "agent_reconnect_wait",
    "task_container_defaults",
    "kubernetes_namespace",
}
_SCHEDULER_TYPES = {"priority", "fair_share", "round_robin"}
_FITTING = {"best", "worst"}


class ConfigFileError(ValueError):
    """The config file cannot be used; the message names the key."""


@dataclass(frozen=True)
class MasterConfigFile:
    pools: tuple[PoolSettings, ...]
    default_compute_pool: str | None = None
    default_aux_pool: str | None = None
    # Determined's `webhooks: {signing_key, base_url}`.
    webhook_signing_key: str = ""
    webhook_base_url: str = ""
    # Determined's feature_switches (feature_switches.py).
    feature_switches: tuple[str, ...] = ()
    # Cairn: how agents authenticate (`agent_auth: credentials|cluster_token`); None: not set here.
    agent_auth: str | None = None
    # Determined's `oidc:` block (oidc.py): single sign-on; None: off.
    oidc: OidcSettings | None = None


def _scheduler(block: Any, where: str) -> dict[str, Any]:
    if block is None:
        return {}
    if not isinstance(block, Mapping):
        raise InvalidArgument(f"{where}: must be a mapping")
    kind = block.get("type", "priority")
    if kind not in _SCHEDULER_TYPES:
        raise InvalidArgument(f"{where}.type: {kind!r} is not one of {', '.join(sorted(_SCHEDULER_TYPES))}")
    fitting = block.get("fitting_policy", "best")
    if fitting not in _FITTING:
        raise InvalidArgument(f"{where}.fitting_policy: {fitting!r} is not best or worst")
    priority = block.get("priority") or {}
    if not isinstance(priority, Mapping):
        raise InvalidArgument(f"{where}.priority: must be a mapping")
    preemption = priority.get("preemption", block.get("preemption", False))
    if not isinstance(preemption, bool):
        raise InvalidArgument(f"{where}.priority.preemption: must be true or false")
    default_priority = priority.get("default_priority", 42)
    if (
        isinstance(default_priority, bool)
        or not isinstance(default_priority, int)
        or not 1 <= default_priority <= 99
    ):
        raise InvalidArgument(f"{where}.priority.default_priority: {default_priority!r} must be 1 to 99")
    fair_share = block.get("fair_share") or {}
    if not isinstance(fair_share, Mapping) or set(fair_share) - {"usage_half_life", "min_run_before_reclaim"}:
        raise InvalidArgument(
            f"{where}.fair_share: a mapping with at most usage_half_life and min_run_before_reclaim"
        )
    half_life = parse_duration(fair_share.get("usage_half_life", "1h"), f"{where}.fair_share.usage_half_life")
    if not 60 <= half_life <= 90 * 24 * 3600:
        raise InvalidArgument(f"{where}.fair_share.usage_half_life: between 1m and 90 days")
    min_run = parse_duration(
        fair_share.get("min_run_before_reclaim", "10s"), f"{where}.fair_share.min_run_before_reclaim"
    )
    if min_run > 24 * 3600:
        raise InvalidArgument(f"{where}.fair_share.min_run_before_reclaim: at most 24h")
    return {
        "fitting_policy": fitting,
        "preemption_enabled": preemption,
        "default_priority": default_priority,
        "scheduler_type": "fair_share" if kind == "fair_share" else "priority",
        "usage_half_life_s": half_life,
        "min_run_before_reclaim_s": min_run,
    }


def _pool(block: Any, where: str) -> PoolSettings:
    if not isinstance(block, Mapping):
        raise InvalidArgument(f"{where}: must be a mapping with a pool_name")
    unknown = set(block) - _POOL_KEYS - _IGNORED_POOL_KEYS
    if unknown:
        raise InvalidArgument(f"{where}.{sorted(unknown)[0]}: not a resource pool setting")
    name = block.get("pool_name")
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise InvalidArgument(f"{where}.pool_name: a name of 1 to 255 characters is required")
    description = block.get("description", "")
    if not isinstance(description, str) or len(description) > 1024:
        raise InvalidArgument(f"{where}.description: text of at most 1024 characters")
    provider_block = block.get("provider")
    provider = None
    if provider_block is not None:
        provider_block = dict(provider_block) if isinstance(provider_block, Mapping) else provider_block
        if isinstance(provider_block, dict) and "max_aux_containers_per_agent" in block:
            provider_block.setdefault("max_aux_containers_per_agent", block["max_aux_containers_per_agent"])
        provider = parse_provider(provider_block, f"{where}.provider")
    return PoolSettings(
        name=name,
        description=description,
        provider=provider,
        **_scheduler(block.get("scheduler"), f"{where}.scheduler"),
    )


def parse_master_config(data: Any) -> MasterConfigFile:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise InvalidArgument("(top level): the config file must be a mapping")
    raw_pools = data.get("resource_pools")
    if raw_pools is None:
        raw_pools = [{"pool_name": "default"}]
    if not isinstance(raw_pools, list) or not raw_pools or len(raw_pools) > MAX_POOLS:
        raise InvalidArgument(f"resource_pools: a list of 1 to {MAX_POOLS} pools")
    pools = tuple(_pool(block, f"resource_pools[{i}]") for i, block in enumerate(raw_pools))
    names = [p.name for p in pools]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise InvalidArgument(f"resource_pools[{i}].pool_name: {name!r} is named twice")
    defaults = {}
    for key in ("default_compute_resource_pool", "default_aux_resource_pool"):
        value = data.get(key)
        if value is not None and value not in names:
            raise InvalidArgument(f"{key}: no resource pool {value!r} (pools: {', '.join(names)})")
        defaults[key] = value
    webhooks = _webhooks(data.get("webhooks"))
    return MasterConfigFile(
        pools=pools,
        default_compute_pool=defaults["default_compute_resource_pool"],
        default_aux_pool=defaults["default_aux_resource_pool"],
        webhook_signing_key=webhooks["signing_key"],
        webhook_base_url=webhooks["base_url"],
        feature_switches=parse_feature_switches(data.get("feature_switches")),
        agent_auth=_agent_auth(data.get("agent_auth")),
        oidc=parse_oidc(data.get("oidc")),
    )


AGENT_AUTH_MODES = ("credentials", "cluster_token")


def _agent_auth(value: Any) -> str | None:
    if value is None:
        return None
    if value not in AGENT_AUTH_MODES:
        raise InvalidArgument(f"agent_auth: {str(value)[:64]!r} is not one of {', '.join(AGENT_AUTH_MODES)}")
    return str(value)


def _webhooks(block: Any) -> dict[str, str]:
    if block is None:
        block = {}
    if not isinstance(block, Mapping):
        raise InvalidArgument("webhooks: must be a mapping (signing_key, base_url)")
    out = {}
    for key in ("signing_key", "base_url"):
        value = block.get(key) or ""
        if not isinstance(value, str) or len(value) > 4096:
            raise InvalidArgument(f"webhooks.{key}: must be a string of at most 4096 characters")
        out[key] = value
    unknown = set(block) - {"signing_key", "base_url"}
    if unknown:
        raise InvalidArgument(f"webhooks.{sorted(unknown)[0]}: unknown key (known: signing_key, base_url)")
    return out


def load_master_config(path: Path) -> MasterConfigFile:
    """The file at `path`, checked; ConfigFileError naming the file and the key otherwise."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigFileError(f"--config-file: cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigFileError(f"--config-file: {path} is over {MAX_CONFIG_BYTES} bytes")
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"--config-file: {path} is not YAML: {exc}") from None
    try:
        return parse_master_config(data)
    except InvalidArgument as exc:
        raise ConfigFileError(f"--config-file {path}: {exc}") from None
