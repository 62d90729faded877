"""Config templates: the merge of a template under an experiment's config (Determined's schemas.Merge
rules), and what a template may hold (a partial config)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.master.domain.config import validate_config
from services.master.domain.config.partial import validate_partial_config
from services.master.domain.config.template_merge import merge_template


def test_the_config_wins_and_fills_nothing_it_gives() -> None:
    config = {"name": "mine", "max_restarts": 0, "description": None, "entrypoint": ["python3", "a.py"]}
    template = {"name": "theirs", "max_restarts": 5, "description": "shared", "entrypoint": "b.sh"}
    # An explicit null reads as not given (Determined's nil pointer): the template fills it.
    assert merge_template(config, template) == {
        "name": "mine",
        "max_restarts": 0,
        "description": "shared",
        "entrypoint": ["python3", "a.py"],
    }


def test_mappings_merge_recursively_and_lists_are_kept_whole() -> None:
    config = {
        "data": {"url": "s3://mine", "nested": {"a": 1}, "files": ["x"]},
        "resources": {"slots_per_trial": 2},
        "environment": {"ports": {"web": 80}, "add_capabilities": ["NET_ADMIN"]},
    }
    template = {
        "data": {"url": "s3://theirs", "nested": {"b": 2}, "files": ["y", "z"], "extra": True},
        "resources": {"slots_per_trial": 1, "resource_pool": "gpus", "priority": 10},
        "environment": {"ports": {"web": 81, "tb": 6006}, "add_capabilities": ["SYS_PTRACE"]},
    }
    assert merge_template(config, template) == {
        "data": {"url": "s3://mine", "nested": {"a": 1, "b": 2}, "files": ["x"], "extra": True},
        "resources": {"slots_per_trial": 2, "resource_pool": "gpus", "priority": 10},
        "environment": {"ports": {"web": 80, "tb": 6006}, "add_capabilities": ["NET_ADMIN"]},
    }


def test_neither_input_is_changed() -> None:
    config = {"data": {"a": [1]}, "labels": ["x"]}
    template = {
        "data": {"b": {"c": 1}},
        "labels": ["y"],
        "bind_mounts": [{"host_path": "/h", "container_path": "/c"}],
    }
    before = (copy.deepcopy(config), copy.deepcopy(template))
    merged = merge_template(config, template)
    merged["data"]["b"]["c"] = 2
    merged["bind_mounts"][0]["host_path"] = "/changed"
    assert (config, template) == before


def test_bind_mounts_and_devices_keep_the_configs_on_a_shared_container_path() -> None:
    config = {
        "bind_mounts": [{"host_path": "/mine", "container_path": "/data"}],
        "resources": {"devices": ["/dev/a:/dev/x", {"host_path": "/dev/b", "container_path": "/dev/y"}]},
    }
    template = {
        "bind_mounts": [
            {"host_path": "/theirs", "container_path": "/data"},
            {"host_path": "/cache", "container_path": "/cache", "read_only": True},
        ],
        "resources": {"devices": ["/dev/c:/dev/y:rw", {"host_path": "/dev/d", "container_path": "/dev/z"}]},
    }
    merged = merge_template(config, template)
    assert merged["bind_mounts"] == [
        {"host_path": "/mine", "container_path": "/data"},
        {"host_path": "/cache", "container_path": "/cache", "read_only": True},
    ]
    assert merged["resources"]["devices"] == [
        "/dev/a:/dev/x",
        {"host_path": "/dev/b", "container_path": "/dev/y"},
        {"host_path": "/dev/d", "container_path": "/dev/z"},
    ]


def test_proxy_ports_are_added_by_port() -> None:
    config = {"environment": {"proxy_ports": [{"proxy_port": 8888, "proxy_tcp": True}]}}
    template = {"environment": {"proxy_ports": [{"proxy_port": 8888}, {"proxy_port": 6006}]}}
    assert merge_template(config, template)["environment"]["proxy_ports"] == [
        {"proxy_port": 8888, "proxy_tcp": True},
        {"proxy_port": 6006},
    ]


@pytest.mark.parametrize(
    ("config", "template", "expected"),
    [
        # Template first, so the config's assignment of the same variable comes later and wins.
        (["A=mine", "B=2"], ["A=theirs", "C=3"], ["A=theirs", "C=3", "A=mine", "B=2"]),
        # A plain list holds for every flavour; `gpu` is the legacy name of `cuda`.
        (
            {"cpu": ["A=cpu"], "gpu": ["A=gpu"]},
            ["T=1"],
            {"cpu": ["T=1", "A=cpu"], "cuda": ["T=1", "A=gpu"], "rocm": ["T=1"]},
        ),
        (["A=1"], {"cuda": ["T=1"]}, {"cpu": ["A=1"], "cuda": ["T=1", "A=1"], "rocm": ["A=1"]}),
    ],
)
def test_environment_variables_put_the_templates_first(config: Any, template: Any, expected: Any) -> None:
    merged = merge_template(
        {"environment": {"environment_variables": config}},
        {"environment": {"environment_variables": template}},
    )
    assert merged["environment"]["environment_variables"] == expected


@pytest.mark.parametrize(
    ("config", "template", "expected"),
    [
        ("mine:1", {"cpu": "theirs:cpu"}, "mine:1"),  # one image for every flavour
        ({"cpu": "mine:cpu"}, "theirs:1", {"cpu": "mine:cpu", "cuda": "theirs:1", "rocm": "theirs:1"}),
        (
            {"gpu": "mine:gpu"},
            {"cuda": "theirs:cuda", "rocm": "theirs:rocm"},
            {"cuda": "mine:gpu", "rocm": "theirs:rocm"},
        ),
    ],
)
def test_images_merge_by_device_flavour(config: Any, template: Any, expected: Any) -> None:
    merged = merge_template({"environment": {"image": config}}, {"environment": {"image": template}})
    assert merged["environment"]["image"] == expected


def test_labels_are_the_union() -> None:
    assert merge_template({"labels": ["a", "b"]}, {"labels": ["b", "c"]})["labels"] == ["a", "b", "c"]


def test_hyperparameters_merge_by_name_and_a_given_one_is_kept_whole() -> None:
    config = {
        "hyperparameters": {
            "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
            "layers": 3,
            "dropout": None,
            "optimizer": {"name": "adam", "betas": {"b1": 0.9}},
        }
    }
    template = {
        "hyperparameters": {
            "lr": {"type": "double", "minval": 0.1, "maxval": 0.5, "count": 4},
            "layers": {"type": "int", "minval": 1, "maxval": 8},
            "dropout": 0.5,
            "batch_size": 32,
            "optimizer": {"name": "sgd", "momentum": 0.9, "betas": {"b2": 0.99}},
        }
    }
    assert merge_template(config, template)["hyperparameters"] == {
        # Never field by field: a log hyperparameter does not pick up the double's count.
        "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
        "layers": 3,
        "dropout": None,  # a null hyperparameter is a const, not "not given"
        "batch_size": 32,
        # Nested groups merge by name again.
        "optimizer": {"name": "adam", "momentum": 0.9, "betas": {"b1": 0.9, "b2": 0.99}},
    }


def test_a_searcher_of_another_name_takes_only_the_shared_fields() -> None:
    config = {"searcher": {"name": "single", "max_length": {"batches": 100}}}
    template = {
        "searcher": {
            "name": "random",
            "metric": "val_loss",
            "smaller_is_better": False,
            "max_trials": 8,
            "max_length": {"epochs": 1},
        }
    }
    assert merge_template(config, template)["searcher"] == {
        "name": "single",
        "max_length": {"batches": 100},
        "metric": "val_loss",
        "smaller_is_better": False,
    }


def test_a_searcher_of_the_same_name_or_none_takes_every_field_and_lengths_stay_whole() -> None:
    template = {
        "searcher": {"name": "random", "metric": "loss", "max_trials": 8, "max_length": {"epochs": 1}}
    }
    same = merge_template({"searcher": {"name": "random", "max_length": {"batches": 5}}}, template)
    assert same["searcher"] == {
        "name": "random",
        "metric": "loss",
        "max_trials": 8,
        "max_length": {"batches": 5},
    }
    unnamed = merge_template({"searcher": {"metric": "acc"}}, template)
    assert unnamed["searcher"] == {
        "name": "random",
        "metric": "acc",
        "max_trials": 8,
        "max_length": {"epochs": 1},
    }


def test_checkpoint_storage_is_a_union_on_type() -> None:
    template = {"checkpoint_storage": {"type": "s3", "bucket": "team", "save_trial_best": 3}}
    other_type = merge_template({"checkpoint_storage": {"type": "shared_fs", "host_path": "/ckpt"}}, template)
    assert other_type["checkpoint_storage"] == {
        "type": "shared_fs",
        "host_path": "/ckpt",
        "save_trial_best": 3,
    }
    gc_only = merge_template({"checkpoint_storage": {"save_trial_best": 1}}, template)
    assert gc_only["checkpoint_storage"] == {"type": "s3", "bucket": "team", "save_trial_best": 1}


def test_whole_periods_are_never_combined() -> None:
    merged = merge_template(
        {"min_validation_period": {"batches": 10}}, {"min_validation_period": {"epochs": 1}}
    )
    assert merged["min_validation_period"] == {"batches": 10}


def test_log_policies_add_the_templates_by_name() -> None:
    config = {
        "log_policies": [{"name": "oom", "pattern": ".*mine.*"}, {"pattern": "x", "action": "cancel_retries"}]
    }
    template = {
        "log_policies": [
            {"name": "oom", "pattern": ".*theirs.*"},
            {"name": "ecc", "pattern": ".*ECC.*"},
            {"pattern": "x", "action": "cancel_retries"},
        ]
    }
    assert merge_template(config, template)["log_policies"] == [
        {"name": "oom", "pattern": ".*mine.*"},
        {"pattern": "x", "action": "cancel_retries"},
        {"name": "ecc", "pattern": ".*ECC.*"},
    ]


def test_values_of_the_wrong_shape_are_left_to_validation() -> None:
    merged = merge_template(
        {"bind_mounts": "oops", "labels": "x", "hyperparameters": 3, "searcher": ["a"]},
        {
            "bind_mounts": [{"host_path": "/a", "container_path": "/b"}],
            "labels": ["y"],
            "hyperparameters": {"a": 1},
        },
    )
    assert merged == {"bind_mounts": "oops", "labels": "x", "hyperparameters": 3, "searcher": ["a"]}
    problems = validate_config({"entrypoint": "a", **merged})
    assert "bind_mounts: must be a list" in problems and "searcher: must be a mapping" in problems


def test_a_merged_config_is_a_valid_config() -> None:
    config = {"entrypoint": "python3 train.py", "hyperparameters": {"lr": 0.1}}
    template = {
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/ckpt"},
        "hyperparameters": {"batch_size": 16},
    }
    assert validate_config(merge_template(config, template)) == []


# --- what a template may hold -------------------------------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        {},
        {"searcher": {"metric": "loss"}},  # a searcher without a name
        {"checkpoint_storage": {"save_trial_best": 3}},  # storage without a type
        {"searcher": {"name": "random", "metric": "loss"}},  # max_trials may come from the config
        {"searcher": {"name": "adaptive_asha", "max_trials": 4}},
        {"resources": {"slots_per_trial": 2}, "environment": {"image": "python:3.11"}},
        {"description": None, "labels": ["team-a"]},
    ],
)
def test_partial_configs_that_can_take_part_in_an_experiment(template: dict[str, Any]) -> None:
    assert validate_partial_config(template) == []


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ([1, 2], ["config: must be a mapping"]),
        ({"descripton": "x"}, ["descripton: unknown field (did you mean 'description'?)"]),
        ({"max_restarts": "three"}, ["max_restarts: must be an integer"]),
        ({"resources": {"slots_per_trial": -1}}, ["resources.slots_per_trial: must be >= 0"]),
        ({"searcher": {"name": "random", "max_trials": 0}}, ["searcher.max_trials: must be >= 1"]),
        # Without a name, a template's searcher merges only its shared fields: a member's own is refused.
        (
            {"searcher": {"metric": "x", "max_trials": 8}},
            [
                "searcher.max_trials: needs searcher.name (without it a template gives only metric, "
                "smaller_is_better, source_checkpoint_uuid, source_trial_id)"
            ],
        ),
        (
            {"checkpoint_storage": {"save_trial_best": 1, "bucket": "b"}},
            [
                "checkpoint_storage.bucket: needs checkpoint_storage.type (without it a template gives only "
                "save_experiment_best, save_trial_best, save_trial_latest)"
            ],
        ),
        ({"searcher": {"metric": "x", "bogus": 1}}, ["searcher.bogus: unknown field"]),
        ({"searcher": {"name": "random", "bogus": 1}}, ["searcher.bogus: unknown field"]),
        (
            {"checkpoint_storage": {"type": "gcs"}},
            ["checkpoint_storage.type: 'gcs' is not supported by Cairn yet"],
        ),
        # What merges in whole must be whole.
        ({"hyperparameters": {"lr": {"type": "int", "maxval": 3}}}, ["hyperparameters.lr.minval: required"]),
        ({"bind_mounts": [{"host_path": "/a"}]}, ["bind_mounts[0].container_path: required"]),
        (
            {"min_validation_period": {"batches": 1, "epochs": 1}},
            ["min_validation_period: must have exactly one of batches, records, epochs"],
        ),
    ],
)
def test_partial_configs_refused_with_every_problem_named(template: Any, expected: list[str]) -> None:
    assert validate_partial_config(template) == expected
