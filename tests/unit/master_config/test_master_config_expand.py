"""expand_config: a valid Determined-style config comes back with every documented default filled."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from services.master.domain.config import ConfigDefaults, ConfigError, expand_config, parse_config_text

COMMON_SEARCHER_DEFAULTS = {
    "smaller_is_better": True,
    "source_trial_id": None,
    "source_checkpoint_uuid": None,
}


def _expand(text: str, defaults: ConfigDefaults) -> dict[str, Any]:
    return expand_config(parse_config_text(text), defaults)


def test_minimal_config_expands_to_every_documented_default(defaults: ConfigDefaults) -> None:
    text = """
name: minimal
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
"""
    assert _expand(text, defaults) == {
        "name": "minimal",
        "description": None,
        "labels": [],
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", **COMMON_SEARCHER_DEFAULTS},
        "hyperparameters": {},
        "resources": {
            "slots_per_trial": 1,
            "resource_pool": "default",
            "priority": None,
            "weight": 1,
            "max_slots": None,
        },
        "max_restarts": 5,
        "checkpoint_storage": {
            "type": "shared_fs",
            "host_path": "/var/lib/cairn/checkpoints",
            "save_experiment_best": 0,
            "save_trial_best": 1,
            "save_trial_latest": 1,
        },
        "checkpoint_policy": "best",
        "environment": {"image": None, "environment_variables": [], "force_pull_image": False},
        "reproducibility": {"experiment_seed": 1234},
        "data": {},
        "min_validation_period": {"batches": 0},
        "min_checkpoint_period": {"batches": 0},
        "preemption_timeout": None,
        "records_per_epoch": 0,
        "scheduling_unit": 100,
        "perform_initial_validation": False,
        "bind_mounts": [],
        "debug": False,
        "profiling": {"enabled": False, "begin_on_batch": 0, "sync_timings": True},
        "optimizations": {
            "aggregation_frequency": 1,
            "average_aggregated_gradients": True,
            "average_training_metrics": True,
            "gradient_compression": False,
            "grad_updates_size_file": None,
            "mixed_precision": "O0",
            "tensor_fusion_threshold": 64,
            "tensor_fusion_cycle_time": 1,
            "auto_tune_tensor_fusion": False,
        },
        "log_policies": [],
    }


@pytest.mark.parametrize(
    ("searcher_yaml", "expected"),
    [
        pytest.param(
            "{name: single, metric: loss, max_length: {batches: 100}}",
            {"name": "single", "metric": "loss", "max_length": {"batches": 100}},
            id="single",
        ),
        pytest.param(
            "{name: random, metric: loss, max_trials: 8}",
            {"name": "random", "metric": "loss", "max_trials": 8, "max_concurrent_trials": 16},
            id="random",
        ),
        pytest.param(
            "{name: grid, metric: loss, smaller_is_better: false}",
            {"name": "grid", "metric": "loss", "max_concurrent_trials": 16, "smaller_is_better": False},
            id="grid",
        ),
        pytest.param(
            "{name: adaptive_asha, metric: loss, max_trials: 16, time_metric: batches, max_time: 1000}",
            {
                "name": "adaptive_asha",
                "metric": "loss",
                "max_trials": 16,
                "time_metric": "batches",
                "max_time": 1000,
                "mode": "standard",
                "divisor": 4,
                "max_rungs": 5,
                "bracket_rungs": [],
                "max_concurrent_trials": 16,
                "stop_once": True,
            },
            id="adaptive_asha",
        ),
        pytest.param(
            "{name: async_halving, metric: loss, num_rungs: 3, max_trials: 9, time_metric: epochs,"
            " max_time: 9}",
            {
                "name": "async_halving",
                "metric": "loss",
                "num_rungs": 3,
                "max_trials": 9,
                "time_metric": "epochs",
                "max_time": 9,
                "divisor": 4,
                "max_concurrent_trials": 16,
                "stop_once": True,
            },
            id="async_halving",
        ),
        pytest.param(
            "{name: adaptive_asha, metric: loss, max_trials: 4, stop_once: false, max_length: {batches: 64}}",
            {
                "name": "adaptive_asha",
                "metric": "loss",
                "max_trials": 4,
                "max_length": {"batches": 64},
                "mode": "standard",
                "divisor": 4,
                "max_rungs": 5,
                "bracket_rungs": [],
                "max_concurrent_trials": 16,
                "stop_once": False,
            },
            id="adaptive_asha-legacy-max_length-promotion-mode",
        ),
        pytest.param(
            "{name: custom, metric: loss, address: 'searchers.local:7000', budget: 12}",
            {"name": "custom", "metric": "loss", "address": "searchers.local:7000", "budget": 12},
            id="custom-address",
        ),
        pytest.param(
            "{name: custom, metric: loss, plugin: bayes-opt, smaller_is_better: false}",
            {"name": "custom", "metric": "loss", "plugin": "bayes-opt", "smaller_is_better": False},
            id="custom-plugin",
        ),
    ],
)
def test_each_searcher_expands_with_its_defaults(
    searcher_yaml: str, expected: dict[str, Any], defaults: ConfigDefaults
) -> None:
    text = f"""
entrypoint: [python3, train.py]
hyperparameters:
  lr: {{type: double, minval: 0.001, maxval: 0.1, count: 3}}
searcher: {searcher_yaml}
"""
    assert _expand(text, defaults)["searcher"] == {**COMMON_SEARCHER_DEFAULTS, **expected}


def test_master_defaults_fill_what_the_config_leaves_open(defaults: ConfigDefaults) -> None:
    config = _expand(
        "entrypoint: x\nsearcher: {name: single, metric: m}\nresources: {resource_pool: ''}", defaults
    )
    assert re.fullmatch(r"experiment-[0-9a-f]{8}", config["name"])
    assert config["resources"]["resource_pool"] == "default"
    assert config["reproducibility"] == {"experiment_seed": 1234}
    assert config["checkpoint_storage"]["host_path"] == "/var/lib/cairn/checkpoints"


def test_the_configs_own_choices_win_over_master_defaults(defaults: ConfigDefaults) -> None:
    text = """
entrypoint: x
searcher: {name: single, metric: m}
resources: {resource_pool: gpus, slots_per_trial: 4, priority: 10, weight: 0.5, max_slots: 8}
reproducibility: {experiment_seed: 7}
checkpoint_storage: {type: s3, bucket: ckpts, prefix: team/, save_trial_latest: 3}
"""
    config = _expand(text, defaults)
    assert config["resources"] == {
        "resource_pool": "gpus",
        "slots_per_trial": 4,
        "priority": 10,
        "weight": 0.5,
        "max_slots": 8,
    }
    assert config["reproducibility"] == {"experiment_seed": 7}
    assert config["checkpoint_storage"] == {
        "type": "s3",
        "bucket": "ckpts",
        "prefix": "team/",
        "save_experiment_best": 0,
        "save_trial_best": 1,
        "save_trial_latest": 3,
    }


def test_implicit_consts_are_written_out_and_nesting_is_kept(defaults: ConfigDefaults) -> None:
    text = """
entrypoint: x
searcher: {name: single, metric: m}
hyperparameters:
  global_batch_size: 64
  layers: [64, 32]
  optimizer:
    name: adam
    lr: {type: log, minval: -4, maxval: -1, base: 10}
    schedule: {warmup: {type: const, val: null}}
"""
    assert _expand(text, defaults)["hyperparameters"] == {
        "global_batch_size": {"type": "const", "val": 64},
        "layers": {"type": "const", "val": [64, 32]},
        "optimizer": {
            "name": {"type": "const", "val": "adam"},
            "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
            "schedule": {"warmup": {"type": "const", "val": None}},
        },
    }


def test_null_on_a_typed_field_means_not_given(defaults: ConfigDefaults) -> None:
    text = """
entrypoint: x
searcher: {name: random, metric: m, max_trials: 2, max_concurrent_trials: null}
checkpoint_storage: null
max_restarts: null
description: null
"""
    config = _expand(text, defaults)
    assert config["searcher"]["max_concurrent_trials"] == 16
    assert config["checkpoint_storage"]["type"] == "shared_fs"
    assert config["max_restarts"] == 5
    assert config["description"] is None


def test_environment_and_period_shapes_are_kept(defaults: ConfigDefaults) -> None:
    text = """
entrypoint: x
searcher: {name: single, metric: m}
environment:
  image: {cpu: python:3.11, cuda: nvcr.io/pytorch:24.01}
  environment_variables: {cpu: [A=1], cuda: [A=2, B=]}
min_validation_period: {epochs: 1}
records_per_epoch: 1000
"""
    config = _expand(text, defaults)
    assert config["environment"] == {
        "image": {"cpu": "python:3.11", "cuda": "nvcr.io/pytorch:24.01"},
        "environment_variables": {"cpu": ["A=1"], "cuda": ["A=2", "B="]},
        "force_pull_image": False,
    }
    assert config["min_validation_period"] == {"epochs": 1}


def test_expanded_config_is_json_and_expanding_again_changes_nothing(defaults: ConfigDefaults) -> None:
    text = """
name: again
entrypoint: x
data: {released: 2024-01-31, 1: one}
searcher: {name: adaptive_asha, metric: m, max_trials: 4, time_metric: batches, max_time: 64}
hyperparameters: {a: 1, g: {b: {type: categorical, vals: [x, y]}}}
"""
    once = _expand(text, defaults)
    assert json.loads(json.dumps(once)) == once
    assert once["data"] == {"released": "2024-01-31", "1": "one"}
    other = ConfigDefaults(
        checkpoint_storage={"type": "directory", "container_path": "/c"}, resource_pool="p", experiment_seed=9
    )
    assert expand_config(once, other) == once


def test_expand_leaves_the_raw_config_untouched(defaults: ConfigDefaults) -> None:
    raw = parse_config_text("entrypoint: x\nsearcher: {name: single, metric: m}\nhyperparameters: {a: 1}")
    before = copy.deepcopy(raw)
    expand_config(raw, defaults)
    assert raw == before


def test_expand_refuses_an_invalid_config_with_every_problem(defaults: ConfigDefaults) -> None:
    raw = parse_config_text("searcher: {name: random, metric: m, max_trials: -1}\nmax_restarts: -2")
    with pytest.raises(ConfigError) as caught:
        expand_config(raw, defaults)
    assert caught.value.problems == [
        "entrypoint: required",
        "max_restarts: must be >= 0",
        "searcher.max_trials: must be >= 1",
    ]
    assert (
        str(caught.value)
        == "entrypoint: required; max_restarts: must be >= 0; searcher.max_trials: must be >= 1"
    )


def test_a_bad_master_default_storage_is_reported_too() -> None:
    broken = ConfigDefaults(checkpoint_storage={"type": "s3"}, resource_pool="default", experiment_seed=1)
    raw = parse_config_text("entrypoint: x\nsearcher: {name: single, metric: m}")
    with pytest.raises(ConfigError, match=r"checkpoint_storage\.bucket: required"):
        expand_config(raw, broken)


def test_partial_checkpoint_storage_is_merged_over_the_masters(defaults: ConfigDefaults) -> None:
    base = "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss}\n"
    only_gc = expand_config(
        parse_config_text(base + "checkpoint_storage: {save_trial_best: 0, save_experiment_best: 2}\n"),
        defaults,
    )
    storage = only_gc["checkpoint_storage"]
    assert {k: v for k, v in storage.items() if not k.startswith("save_")} == {
        k: v for k, v in defaults.checkpoint_storage.items() if not k.startswith("save_")
    }
    assert (storage["save_trial_best"], storage["save_experiment_best"], storage["save_trial_latest"]) == (
        0,
        2,
        1,
    )
    other_type = expand_config(
        parse_config_text(base + "checkpoint_storage: {type: directory, container_path: /ckpt}\n"), defaults
    )
    assert other_type["checkpoint_storage"]["type"] == "directory"
    assert "host_path" not in other_type["checkpoint_storage"]
