"""ExperimentConfigView: the typed fields the master reads from an expanded configuration."""

from __future__ import annotations

import dataclasses

import pytest

from services.master.domain.config import (
    ConfigDefaults,
    ExperimentConfigView,
    expand_config,
    parse_config_text,
)


def _view(text: str, defaults: ConfigDefaults) -> ExperimentConfigView:
    return ExperimentConfigView.from_expanded(expand_config(parse_config_text(text), defaults))


def test_view_of_a_full_config(defaults: ConfigDefaults) -> None:
    text = """
name: full
description: every field the view reads
labels: [a, b]
entrypoint: [python3, train.py, --fast]
searcher: {name: random, metric: acc, smaller_is_better: false, max_trials: 12}
hyperparameters: {lr: 0.1}
resources: {slots_per_trial: 2, resource_pool: gpu, priority: 7, weight: 2, max_slots: 6}
max_restarts: 1
checkpoint_storage: {type: directory, container_path: /ckpt}
environment:
  image: {cuda: cuda-image, cpu: cpu-image}
  environment_variables: {cpu: [MODE=cpu, EMPTY=, EQ=a=b], cuda: [MODE=cuda]}
reproducibility: {experiment_seed: 99}
preemption_timeout: 30
data: {url: s3://bucket/data}
"""
    view = _view(text, defaults)
    assert view == ExperimentConfigView(
        name="full",
        description="every field the view reads",
        labels=["a", "b"],
        entrypoint=["python3", "train.py", "--fast"],
        entrypoint_is_shell=False,
        searcher={
            "name": "random",
            "metric": "acc",
            "smaller_is_better": False,
            "max_trials": 12,
            "max_concurrent_trials": 16,
            "source_trial_id": None,
            "source_checkpoint_uuid": None,
        },
        searcher_name="random",
        searcher_metric="acc",
        smaller_is_better=False,
        max_trials=12,
        hyperparameters={"lr": {"type": "const", "val": 0.1}},
        slots_per_trial=2,
        resource_pool="gpu",
        priority=7,
        weight=2.0,
        max_slots=6,
        max_restarts=1,
        checkpoint_storage={
            "type": "directory",
            "container_path": "/ckpt",
            "save_experiment_best": 0,
            "save_trial_best": 1,
            "save_trial_latest": 1,
        },
        environment_variables={"MODE": "cpu", "EMPTY": "", "EQ": "a=b"},
        image="cpu-image",
        experiment_seed=99,
        preemption_timeout=30,
        data={"url": "s3://bucket/data"},
    )


def test_view_of_a_minimal_config_uses_the_defaults(defaults: ConfigDefaults) -> None:
    view = _view("entrypoint: python3 train.py\nsearcher: {name: grid, metric: loss}", defaults)
    assert view.entrypoint == ["python3 train.py"]
    assert view.entrypoint_is_shell
    assert view.max_trials is None
    assert (view.priority, view.max_slots, view.preemption_timeout, view.image) == (None, None, None, None)
    assert (view.slots_per_trial, view.weight, view.max_restarts) == (1, 1.0, 5)
    assert view.resource_pool == "default"
    assert view.experiment_seed == 1234
    assert view.environment_variables == {}
    assert view.description == ""
    assert view.checkpoint_storage["host_path"] == "/var/lib/cairn/checkpoints"


def test_plain_list_environment_variables_and_string_image(defaults: ConfigDefaults) -> None:
    text = (
        "entrypoint: x\nsearcher: {name: single, metric: m}\n"
        "environment: {image: img:1, environment_variables: [A=1]}"
    )
    view = _view(text, defaults)
    assert (view.image, view.environment_variables) == ("img:1", {"A": "1"})


def test_the_view_is_read_only_and_shares_nothing_with_the_config(defaults: ConfigDefaults) -> None:
    config = expand_config(parse_config_text("entrypoint: x\nsearcher: {name: single, metric: m}"), defaults)
    view = ExperimentConfigView.from_expanded(config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.name = "other"  # type: ignore[misc]
    view.data["changed"] = True
    assert config["data"] == {}
