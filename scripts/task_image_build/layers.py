"""A layer made the registry-free way: run a shell script in a build container from the layer below,
then `docker commit` the container under the layer's tag.

The script's stdout is the layer's report (what it installed, for the image's labels); whatever it
prints for a person goes to stderr. Settings the build needs (pip's configuration) are exported by
the script rather than given to `docker run -e`, because `docker commit` keeps a container's
environment in the image; `--change` sets what the image should carry instead. A mount's mount
point stays behind in the layer as an empty file or folder: the build mounts under one folder
(pip_config.BUILD_DIR), which the task image's own layer empties."""

from __future__ import annotations

import shlex
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from cairn import task_image
from task_image_build.docker_cli import BuildError, docker, dockerfile_string, remove_container

BUILD_CONTAINER_PREFIX = "cairn-task-build-"


@dataclass(frozen=True)
class LayerBuild:
    from_image: str
    tag: str
    script: str
    # Extra `docker run` arguments: mounts.
    run_args: Sequence[str] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    # "host" reaches the package registries; "none" for steps that need nothing from outside.
    network: str = "none"
    # Dockerfile instructions for the committed image (ENV, WORKDIR).
    changes: Sequence[str] = ()
    # The committed image's labels, from the script's report.
    labels: Callable[[str], Mapping[str, str]] = lambda report: {}
    # The committed image's CMD (JSON form).
    command: str = '["python3"]'


def build_layer(layer: LayerBuild) -> str:
    """Builds LAYER and tags it; returns the script's stdout."""
    name = f"{BUILD_CONTAINER_PREFIX}{uuid.uuid4().hex[:12]}"
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in layer.environment.items())
    try:
        done = subprocess.run(
            [
                "docker",
                "run",
                "--name",
                name,
                "--label",
                f"{task_image.LABEL_RECIPE}={task_image.RECIPE_VERSION}",
                "--network",
                layer.network,
                "--workdir",
                "/",
                *layer.run_args,
                layer.from_image,
                "/bin/sh",
                "-euc",
                exports + layer.script,
            ],
            check=False,
            stdout=subprocess.PIPE,
            text=True,
        )
        if done.returncode != 0:
            raise BuildError(
                f"building {layer.tag}: the build container exited {done.returncode}; see the output above"
            )
        changes = [*layer.changes, f"CMD {layer.command}"]
        labels = layer.labels(done.stdout)
        changes += [f"LABEL {k}={dockerfile_string(v)}" for k, v in labels.items()]
        docker(["commit", *(arg for c in changes for arg in ("--change", c)), name, layer.tag])
        return done.stdout
    finally:
        remove_container(name)


def remove_stale_build_containers() -> None:
    """Removes build containers a killed build left behind (stopped ones only: a running one may be
    another build's)."""
    stale = docker(
        [
            "ps",
            "--all",
            "--quiet",
            "--filter",
            f"name=^{BUILD_CONTAINER_PREFIX}",
            "--filter",
            f"label={task_image.LABEL_RECIPE}",
            "--filter",
            "status=exited",
            "--filter",
            "status=created",
        ]
    ).split()
    for container in stale:
        remove_container(container)


def print_progress(message: str) -> None:
    print(f"task image: {message}", file=sys.stderr, flush=True)
