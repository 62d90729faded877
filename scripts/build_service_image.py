#!/usr/bin/env python3
"""Builds the service image deploy/k8s runs (`make images`) and prints its tag.

Two layers on the task image's Debian base (built here too when missing), each reused by tag when
it exists (cairn/service_image.py computes the tags): the dependencies, installed by pip from the
package registries into a venv, pinned by constraints.txt, in a build container on host networking
with this machine's pip configuration (as the task image's); then the services' and the client's
source copied in, with an entry point per service. The image runs as an unprivileged user, checks
its own health (`cairn-probe auto`: gRPC health for the services, /healthz for the master's HTTP)
and its entry points exec Python, so SIGTERM reaches the service itself. A second run with nothing
changed only computes the tags. The image is also tagged cairn-service:latest. Progress goes to
stderr; stdout is the tag alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from build_task_image import cache_dir
from task_image_build import base, pip_config
from task_image_build.docker_cli import BuildError, docker, image_exists
from task_image_build.layers import (
    LayerBuild,
    build_layer,
    print_progress,
    remove_stale_build_containers,
)

from cairn import service_image as image
from cairn import task_image

REPO_ROOT = Path(__file__).resolve().parents[1]
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
VENV_PYTHON = f"{image.VENV}/bin/python"
CONTAINER_SOURCE = f"{pip_config.BUILD_DIR}/app"
CONTAINER_CONSTRAINTS = f"{pip_config.BUILD_DIR}/constraints.txt"
CONTAINER_PYTHON_SOURCE = f"{pip_config.BUILD_DIR}/python"
PYTHON_LIB = f"{image.PYTHON_DIR}/lib"
# Left out of the copied interpreter: other packages, its tests, GUI and build-only files.
PYTHON_EXCLUDES = (
    "./lib/python3.11/site-packages/*",
    "./lib/python3.11/test",
    "./lib/python3.11/idlelib",
    "./lib/python3.11/tkinter",
    "./lib/python3.11/turtledemo",
    "./lib/python3.11/config-3.11-*",
    "./bin/*",
    "*/__pycache__",
)
# Docker's health check of the running image; Kubernetes runs its own probes (deploy/k8s). `docker
# commit --change` takes no HEALTHCHECK: the build container is given it, and commit keeps it.
HEALTHCHECK_RUN_ARGS = (
    f"--health-cmd={image.BIN_DIR}/cairn-probe auto",
    "--health-interval=10s",
    "--health-timeout=10s",
    "--health-start-period=60s",
    "--health-retries=3",
)


def build_deps(tags: image.ServiceImageTags) -> str:
    """The venv with the services' and the client's dependencies, and the services' user."""
    config = pip_config.host_pip_config()
    requirements = image.project_dependencies(REPO_ROOT)
    if sys.version_info[:3] < image.MIN_PYTHON:
        wanted = ".".join(map(str, image.MIN_PYTHON))
        raise BuildError(f"the service image needs Python {wanted} or newer to build on, not {sys.version}")
    python = f"{image.PYTHON_DIR}/bin/python3.11"
    excludes = " ".join(f"--exclude={shlex.quote(e)}" for e in PYTHON_EXCLUDES)
    script = (
        "exec 3>&1 1>&2\n"
        f"mkdir -p {image.PYTHON_DIR}/bin\n"
        f"tar -C {CONTAINER_PYTHON_SOURCE} {excludes} -cf - . | tar -C {image.PYTHON_DIR} -xf -\n"
        f"cp {CONTAINER_PYTHON_SOURCE}/bin/python3.11 {python}\n"
        f"ln -s python3.11 {image.PYTHON_DIR}/bin/python3\n"
        # The copied interpreter's RUNPATH names the build machine's lib folder: the dynamic linker
        # is told where its libpython is, for every process, whatever environment it is given (an
        # agent starts each container's supervisor with a cleaned environment).
        f"echo {PYTHON_LIB} > /etc/ld.so.conf.d/cairn-python.conf\n"
        "ldconfig\n"
        f"{python} -c 'import tarfile, ssl, sqlite3, ctypes; tarfile.data_filter'\n"
        f"useradd --system --uid {image.USER_ID} --user-group --no-create-home "
        f"--home-dir /nonexistent --shell /usr/sbin/nologin {image.USER_NAME}\n"
        f"{python} -m venv {image.VENV}\n"
        f"{VENV_PYTHON} -m pip install --progress-bar off -c {CONTAINER_CONSTRAINTS} "
        f"{shlex.join(requirements)}\n"
        f"{VENV_PYTHON} -m pip check\n"
        f"{VENV_PYTHON} -m pip freeze --all --exclude pip --exclude setuptools | tr '\\n' ' ' >&3\n"
    )
    with tempfile.TemporaryDirectory(prefix="cairn-service-pip-") as tmp:
        config_file = Path(tmp, "pip.conf")
        config_file.write_text(config.ini_text())
        return build_layer(
            LayerBuild(
                from_image=tags.base,
                tag=tags.deps,
                script=script,
                run_args=[
                    *config.docker_mounts(config_file),
                    "-v",
                    f"{REPO_ROOT / 'constraints.txt'}:{CONTAINER_CONSTRAINTS}:ro",
                    "-v",
                    f"{sys.base_prefix}:{CONTAINER_PYTHON_SOURCE}:ro",
                ],
                environment={**pip_config.container_environment(), "PIP_NO_CACHE_DIR": "1"},
                network="host",
                changes=[
                    f"ENV PATH={image.BIN_DIR}:{image.VENV}/bin:{SYSTEM_PATH}",
                ],
                labels=lambda report: {
                    image.LABEL_CONTENTS: f"Debian {task_image.DEBIAN_SUITE} with Python "
                    f"{platform.python_version()} at {image.PYTHON_DIR} and a venv at {image.VENV} "
                    f"holding {' '.join(requirements)}; the services' source goes on top",
                    image.LABEL_PACKAGES: report.strip(),
                },
            )
        )


def stage(out_dir: Path) -> Path:
    """What the image's layer copies in: the source under app/ (its tag is the hash of this copy),
    and the entry points under bin/. Each entry point execs Python, so the service is the process
    the signals reach."""
    staged = out_dir / "stage"
    for rel in image.source_files(REPO_ROOT):
        target = staged / "app" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, target)
    (staged / "bin").mkdir()
    for name, module in image.ENTRY_POINTS.items():
        entry = staged / "bin" / name
        entry.write_text(f'#!/bin/sh\nexec {VENV_PYTHON} -m {module} "$@"\n')
        entry.chmod(0o755)
    return staged


def build_image(tags: image.ServiceImageTags) -> str:
    """Builds the source layer; returns its tag: TAGS' unless the source changed since they were
    computed, when the image is tagged by the copy it holds."""
    script = (
        "exec 3>&1 1>&2\n"
        f"find {pip_config.BUILD_DIR} -mindepth 1 -maxdepth 1 ! -path {CONTAINER_SOURCE}"
        " -exec rm -rf {} +\n"
        f"mkdir -p {image.APP_DIR} {image.BIN_DIR}\n"
        f"cp -a {CONTAINER_SOURCE}/app/. {image.APP_DIR}/\n"
        f"cp -a {CONTAINER_SOURCE}/bin/. {image.BIN_DIR}/\n"
        f"chown -R root:root {image.APP_DIR} {image.BIN_DIR}\n"
        f"chmod -R a+rX,go-w {image.APP_DIR} {image.BIN_DIR}\n"
        # Compiled now, as root: the services' user cannot write beside the source.
        f"{VENV_PYTHON} -m compileall -q {image.APP_DIR}/services {image.APP_DIR}/clients\n"
        f"cd / && PYTHONPATH={image.APP_DIR}:{image.APP_DIR}/clients/python "
        f"{VENV_PYTHON} -c 'import services.master.app, services.agent.app, services.scheduler.app'\n"
    )
    entry_points = " ".join(sorted(image.ENTRY_POINTS))
    with tempfile.TemporaryDirectory(prefix="cairn-service-src-") as tmp:
        staged = stage(Path(tmp))
        copied = image.source_hash(staged / "app")
        if copied != tags.source_hash:
            print_progress("the source changed while it was copied: tagging the image by the copy")
            tags = dataclasses.replace(
                tags, source_hash=copied, image=image.source_image_tag(tags.deps, copied)
            )
            if image_exists(tags.image):
                return tags.image
        build_layer(
            LayerBuild(
                from_image=tags.deps,
                tag=tags.image,
                script=script,
                run_args=["-v", f"{staged}:{CONTAINER_SOURCE}:ro", *HEALTHCHECK_RUN_ARGS],
                changes=[
                    f"ENV PYTHONPATH={image.APP_DIR}:{image.APP_DIR}/clients/python",
                    "ENV PYTHONUNBUFFERED=1",
                    "ENV PYTHONDONTWRITEBYTECODE=1",
                    # The services' home: where settings default their state folders.
                    "ENV HOME=/tmp",
                    "WORKDIR /tmp",
                    f"USER {image.USER_ID}:{image.USER_ID}",
                ],
                command=f'["{image.BIN_DIR}/cairn-master"]',
                labels=lambda _report: {
                    "org.opencontainers.image.title": image.REPOSITORY,
                    "org.opencontainers.image.description": "Cairn's services: " + entry_points,
                    image.LABEL_RECIPE: image.RECIPE_VERSION,
                    image.LABEL_CONTENTS: f"the services' source at {image.APP_DIR}, entry points "
                    f"{entry_points} in {image.BIN_DIR}, on {tags.deps}",
                    image.LABEL_SOURCE_HASH: copied,
                },
            )
        )
    return tags.image


def build(tags: image.ServiceImageTags) -> str:
    remove_stale_build_containers()
    if not image_exists(tags.base):
        started = time.monotonic()
        base.import_base(tags.base, cache_dir())
        print_progress(f"base {tags.base} in {time.monotonic() - started:.0f} s")
    if not image_exists(tags.deps):
        started = time.monotonic()
        build_deps(tags)
        print_progress(f"service dependencies {tags.deps} in {time.monotonic() - started:.0f} s")
    started = time.monotonic()
    tag = build_image(tags)
    print_progress(f"service source layer {tag} in {time.monotonic() - started:.0f} s")
    return tag


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print-tag", action="store_true", help="print the tag; build nothing")
    args = parser.parse_args()
    try:
        tags = image.image_tags(REPO_ROOT)
        tag = tags.image
        if not args.print_tag:
            docker(["version", "--format", "{{.Server.Version}}"])
            if not image_exists(tag):
                started = time.monotonic()
                tag = build(tags)
                print_progress(f"built {tag} in {time.monotonic() - started:.0f} s")
            docker(["tag", tag, image.LATEST_TAG])
    except (BuildError, image.ServiceImageError, task_image.TaskImageError) as e:
        print(f"build_service_image: {e}", file=sys.stderr)
        return 1
    print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
