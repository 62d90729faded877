"""The part of an experiment config the master sends agents of the docker runtime."""

from __future__ import annotations

import json

from services.master.domain.task_spec import container_config


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
