"""The part of an experiment config the master sends agents of the docker runtime."""

from __future__ import annotations

import json

from services.master.domain.allocations.task_spec import container_config
from services.master.domain.config import validate_config


def test_the_master_sends_the_config_part_that_shapes_a_container() -> None:
    config = {
        "entrypoint": "python3 train.py",
        "environment": {
            "image": {"cpu": "a", "cuda": "b"},
            "force_pull_image": True,
            "environment_variables": ["A=1"],
            "pod_spec": None,
        },
        "resources": {"slots_per_trial": 1, "shm_size": "1G", "devices": ["/dev/fuse"]},
        "bind_mounts": [{"host_path": "/d", "container_path": "/d"}],
    }
    assert json.loads(container_config(config)) == {
        "environment": {
            "image": {"cpu": "a", "cuda": "b"},
            "force_pull_image": True,
            "environment_variables": ["A=1"],
        },
        "resources": {"shm_size": "1G", "devices": ["/dev/fuse"]},
        "bind_mounts": [{"host_path": "/d", "container_path": "/d"}],
    }
    assert json.loads(container_config({})) == {"environment": {}, "resources": {}, "bind_mounts": []}


def test_preload_modules_are_checked_and_reach_the_agent() -> None:
    """environment.preload_modules (Cairn's extension for warm starts) is a bounded list of module
    names; the master passes it on to the agent with the rest of the environment part."""
    base = {
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
    }
    good = {**base, "environment": {"preload_modules": ["torch", "numpy.linalg"]}}
    assert validate_config(good) == []
    assert json.loads(container_config(good))["environment"] == {"preload_modules": ["torch", "numpy.linalg"]}
    for bad, expected in (
        (["torch; rm -rf /"], "environment.preload_modules[0]: must be a module name"),
        ("torch", "environment.preload_modules"),
        ([f"m{i}" for i in range(65)], "environment.preload_modules"),
    ):
        problems = validate_config({**base, "environment": {"preload_modules": bad}})
        assert problems and problems[0].startswith(expected), problems
