#!/usr/bin/env python3
"""Builds the task image trials run in under the Docker runtime (`make task-image`) and prints its tag.

Three layers, each reused by tag when it exists (cairn/task_image.py computes the tags): a Debian
bookworm base from debootstrap; the dependencies (requirements-task.txt) in a venv, installed by pip
in a build container on host networking with this machine's pip configuration; the Cairn client on
top. A second run with nothing changed only computes the tags. The image is also tagged
cairn-task:latest. Progress goes to stderr; stdout is the tag alone.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from task_image_build import base, pip_config
from task_image_build.docker_cli import BuildError, docker, image_exists
from task_image_build.layers import (
    LayerBuild,
    build_layer,
    print_progress,
    remove_stale_build_containers,
)

from cairn import task_image

REPO_ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
VENV_PYTHON = f"{task_image.VENV}/bin/python"
# Where build inputs are mounted in a build container.
CONTAINER_CLIENT_WHEEL = f"{pip_config.BUILD_DIR}/client"
# A script's report: NAME==VERSION of each distribution named in its arguments, after Python's own.
_REPORT_VERSIONS = (
    "import importlib.metadata as m, platform, sys\n"
    "print(' '.join([f'python=={platform.python_version()}']"
    " + [f'{n}=={m.version(n)}' for n in sys.argv[1:]]))\n"
)


def cache_dir() -> Path:
    """Where the debootstrap tarball is kept between builds."""
    if os.environ.get("CAIRN_CACHE_DIR"):
        return Path(os.environ["CAIRN_CACHE_DIR"], "task-image")
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home, "cairn", "task-image")


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    if match is None:
        raise BuildError(f"{task_image.REQUIREMENTS_FILE}: no package name in {requirement!r}")
    return match.group(0)


def base_contents() -> str:
    return f"Python 3.11 on Debian {task_image.DEBIAN_SUITE}"


def report_versions(names: list[str]) -> str:
    """Shell lines printing the versions of NAMES to the report (fd 3: stdout is the log's)."""
    return f"{VENV_PYTHON} - {shlex.join(names)} >&3 <<'EOF'\n{_REPORT_VERSIONS}EOF\n"


def build_deps(tags: task_image.TaskImageTags, requirements: task_image.TaskRequirements) -> str:
    """The venv with every requirement but the client; returns what it installed."""
    config = pip_config.host_pip_config()
    names = [requirement_name(r) for r in requirements.packages]
    script = (
        "exec 3>&1 1>&2\n"
        f"python3 -m venv {task_image.VENV}\n"
        f"{VENV_PYTHON} -m pip install --progress-bar off {shlex.join(requirements.all())}\n"
        + report_versions(names)
    )
    with tempfile.TemporaryDirectory(prefix="cairn-task-pip-") as tmp:
        config_file = Path(tmp, "pip.conf")
        config_file.write_text(config.ini_text())
        return build_layer(
            LayerBuild(
                from_image=tags.base,
                tag=tags.deps,
                script=script,
                run_args=config.docker_mounts(config_file),
                # No pip cache: it would be committed into the layer.
                environment={**pip_config.container_environment(), "PIP_NO_CACHE_DIR": "1"},
                network="host",
                changes=[
                    f"ENV PATH={task_image.VENV}/bin:{SYSTEM_PATH}",
                    f"ENV VIRTUAL_ENV={task_image.VENV}",
                ],
                labels=lambda report: {
                    task_image.LABEL_CONTENTS: f"{base_contents()} with a venv at {task_image.VENV} "
                    f"holding {' '.join(requirements.all())}; the Cairn client goes on top",
                    task_image.LABEL_PACKAGES: report.strip(),
                    task_image.LABEL_BASE_IMAGE: tags.base,
                },
            )
        )


def build_client_wheel(out_dir: Path, client_hash: str) -> Path:
    """A wheel of clients/python, built here from a copy of its source (an in-tree build would
    write into the checkout) that must be the source CLIENT_HASH, the image's tag, was taken of."""
    client_dir = REPO_ROOT / task_image.CLIENT_DIR
    copy_root = out_dir / "checkout"
    source = copy_root / task_image.CLIENT_DIR
    for path in task_image.client_source_files(client_dir):
        target = source / path.relative_to(client_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    if task_image.client_source_hash(copy_root) != client_hash:
        raise BuildError(f"{client_dir} changed while the image was being built: run the build again")
    wheels = out_dir / "wheel"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            str(source),
        ],
        check=False,
        stdout=sys.stderr,
    )
    if done.returncode != 0:
        raise BuildError(f"building the Cairn client's wheel failed (exit {done.returncode})")
    return wheels


def build_image(tags: task_image.TaskImageTags, requirements: task_image.TaskRequirements) -> None:
    """The client on the deps layer, checked against its dependencies (pip check)."""
    contents = (
        f"{base_contents()} with a venv at {task_image.VENV} (first on PATH) holding "
        f"the Cairn client ({task_image.CLIENT_DIR}) and {' '.join(requirements.packages)}"
    )
    script = (
        "exec 3>&1 1>&2\n"
        # What the deps layer's build left in the build folder: empty mount points.
        f"find {pip_config.BUILD_DIR} -mindepth 1 -maxdepth 1 ! -path {CONTAINER_CLIENT_WHEEL}"
        " -exec rm -rf {} +\n"
        f"{VENV_PYTHON} -m pip install --no-deps --no-index --progress-bar off "
        f"{CONTAINER_CLIENT_WHEEL}/*.whl\n"
        f"{VENV_PYTHON} -m pip check\n"
        + report_versions(["cairn", *(requirement_name(r) for r in requirements.packages)])
    )
    with tempfile.TemporaryDirectory(prefix="cairn-task-client-") as tmp:
        wheels = build_client_wheel(Path(tmp), tags.client_hash)
        build_layer(
            LayerBuild(
                from_image=tags.deps,
                tag=tags.image,
                script=script,
                run_args=["-v", f"{wheels}:{CONTAINER_CLIENT_WHEEL}:ro"],
                changes=[f"WORKDIR {task_image.WORKDIR}"],
                labels=lambda report: {
                    "org.opencontainers.image.title": task_image.REPOSITORY,
                    "org.opencontainers.image.description": "Cairn's task image: what trials run in",
                    task_image.LABEL_CONTENTS: contents,
                    task_image.LABEL_PACKAGES: report.strip(),
                    task_image.LABEL_CLIENT_HASH: tags.client_hash,
                    task_image.LABEL_DEPS_IMAGE: tags.deps,
                },
            )
        )


def build(tags: task_image.TaskImageTags) -> None:
    requirements = task_image.read_requirements(REPO_ROOT)
    remove_stale_build_containers()
    if not image_exists(tags.base):
        started = time.monotonic()
        base.import_base(tags.base, cache_dir())
        print_progress(f"base {tags.base} in {time.monotonic() - started:.0f} s")
    if not image_exists(tags.deps):
        started = time.monotonic()
        build_deps(tags, requirements)
        print_progress(f"dependencies {tags.deps} in {time.monotonic() - started:.0f} s")
    started = time.monotonic()
    build_image(tags, requirements)
    print_progress(f"client layer {tags.image} in {time.monotonic() - started:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print-tag", action="store_true", help="print the tag; build nothing")
    args = parser.parse_args()
    try:
        tags = task_image.image_tags(REPO_ROOT)
        if not args.print_tag:
            docker(["version", "--format", "{{.Server.Version}}"])
            if not image_exists(tags.image):
                started = time.monotonic()
                build(tags)
                print_progress(f"built {tags.image} in {time.monotonic() - started:.0f} s")
            docker(["tag", tags.image, task_image.LATEST_TAG])
    except (BuildError, task_image.TaskImageError) as e:
        print(f"build_task_image: {e}", file=sys.stderr)
        return 1
    print(tags.image)
    return 0


if __name__ == "__main__":
    sys.exit(main())
