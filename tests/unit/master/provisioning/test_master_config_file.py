"""The master's config file: a Determined master.yaml's resource pools (schedulers, providers)
read unchanged, and every wrong key refused with its path named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from services.master.configuration.config_file import ConfigFileError, load_master_config, parse_master_config
from services.master.configuration.settings import parse_settings
from services.master.domain.kernel.errors import InvalidArgument

DETERMINED_STYLE = """
resource_pools:
  - pool_name: cpu
    description: CPU agents on demand
    max_aux_containers_per_agent: 8
    agent_reattach_enabled: true
    scheduler:
      type: priority
      fitting_policy: worst
      priority: {preemption: true, default_priority: 50}
    provider:
      type: local
      min_instances: 1
      max_instances: 4
      max_idle_agent_period: 5m
      max_agent_starting_period: 90s
      agent_args: [--task-env, cairn-task=/opt/venv]
  - pool_name: fixed
default_compute_resource_pool: cpu
default_aux_resource_pool: fixed
"""


def test_a_determined_master_yaml_reads_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "master.yaml"
    path.write_text(DETERMINED_STYLE)
    config = load_master_config(path)
    cpu, fixed = config.pools
    assert (cpu.name, cpu.fitting_policy, cpu.preemption_enabled, cpu.default_priority) == (
        "cpu",
        "worst",
        True,
        50,
    )
    assert cpu.provider is not None and fixed.provider is None
    limits = cpu.provider.limits
    assert (limits.min_instances, limits.max_instances, limits.max_aux_per_instance) == (1, 4, 8)
    assert (limits.max_idle_agent_period_s, limits.max_agent_starting_period_s) == (300.0, 90.0)
    assert cpu.provider.options == {"agent_args": ["--task-env", "cairn-task=/opt/venv"]}
    settings = parse_settings(["--config-file", str(path)])
    assert (settings.default_pool, settings.default_aux_pool) == ("cpu", "fixed")
    assert [p.name for p in settings.pools] == ["cpu", "fixed"]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("resource_pools: [{pool_name: a, colour: red}]", "resource_pools[0].colour"),
        ("resource_pools: [{description: x}]", "resource_pools[0].pool_name"),
        ("resource_pools: [{pool_name: a}, {pool_name: a}]", "resource_pools[1].pool_name"),
        ("resource_pools: [{pool_name: a, provider: {type: gcp}}]", "resource_pools[0].provider.type"),
        (
            "resource_pools: [{pool_name: a, provider: {type: local, min_instances: 5, max_instances: 2}}]",
            "resource_pools[0].provider.min_instances",
        ),
        (
            "resource_pools: [{pool_name: a, provider: {type: local, max_instances: 100000}}]",
            "resource_pools[0].provider.max_instances",
        ),
        (
            "resource_pools: [{pool_name: a, provider: {type: local, max_idle_agent_period: soon}}]",
            "resource_pools[0].provider.max_idle_agent_period",
        ),
        ("resource_pools: [{pool_name: a, scheduler: {type: gang}}]", "resource_pools[0].scheduler.type"),
        (
            "resource_pools: [{pool_name: a}]\ndefault_compute_resource_pool: b",
            "default_compute_resource_pool",
        ),
        ("resource_pools: []", "resource_pools"),
        ("feature_switches: streaming_updates", "feature_switches"),
        ("feature_switches: [streaming_updates, 3]", "feature_switches"),
    ],
)
def test_wrong_keys_are_refused_naming_them(text: str, named: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        parse_master_config(yaml.safe_load(text))
    assert str(refused.value).startswith(f"{named}:")


def test_an_unreadable_file_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match="--config-file: cannot read"):
        load_master_config(tmp_path / "missing.yaml")
    big = tmp_path / "big.yaml"
    big.write_text("x: " + "y" * (1024 * 1024 + 10))
    with pytest.raises(ConfigFileError, match="over 1048576 bytes"):
        load_master_config(big)


def test_feature_switches_are_read_and_shown_and_default_to_none(tmp_path: Path) -> None:
    assert parse_master_config({}).feature_switches == ()
    config = parse_master_config(
        {"feature_switches": ["streaming_updates", "explist_v2", "streaming_updates"]}
    )
    assert config.feature_switches == ("streaming_updates", "explist_v2")
    path = tmp_path / "master.yaml"
    path.write_text("feature_switches: [streaming_updates]\n")
    assert parse_settings(["--config-file", str(path)]).feature_switches == ("streaming_updates",)
    assert parse_settings([]).feature_switches == ()


def test_unknown_feature_switches_are_refused_naming_every_one() -> None:
    with pytest.raises(InvalidArgument) as refused:
        parse_master_config({"feature_switches": ["streaming_updates", "warp_drive", "teleport"]})
    message = str(refused.value)
    assert message.startswith("feature_switches: unknown switches 'warp_drive', 'teleport'")
    assert "streaming_updates" in message  # the known ones, to choose from
