"""Docker for the tests of the Docker runtime: whether dockerd answers, and the task image.

`make test` installs Docker and starts dockerd where it can (scripts/ensure_docker.sh) and builds the
task image (`make task-image`). The Docker tests skip, with the reason, only where dockerd cannot be
reached; a missing task image while dockerd runs is a failure (the build is part of `make test`),
except its thin client layer, which the fixture builds."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from cairn import service_image
from cairn import task_image as task_image_tags

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build_task_image.py"
SERVICE_BUILD_SCRIPT = REPO_ROOT / "scripts" / "build_service_image.py"
# Written by scripts/ensure_docker.sh when it could not start dockerd: the reason, for the skip.
UNAVAILABLE_REASON_FILE = REPO_ROOT / "test-artifacts" / "docker-unavailable.txt"


@functools.cache
def docker_available() -> str | None:
    """None when dockerd answers; otherwise why the Docker tests cannot run."""
    if os.environ.get("CAIRN_TEST_DOCKER") == "skip":
        return "CAIRN_TEST_DOCKER=skip"
    try:
        client = docker.from_env(timeout=15)
        try:
            client.ping()
        finally:
            client.close()
    except docker.errors.DockerException as e:
        reason = f"dockerd does not answer ({e})"
        if UNAVAILABLE_REASON_FILE.exists():
            reason += f"; scripts/ensure_docker.sh: {UNAVAILABLE_REASON_FILE.read_text().strip()}"
        return reason
    return None


def _has_image(tag: str) -> bool:
    client = docker.from_env(timeout=15)
    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False
    finally:
        client.close()


def require_task_image() -> str:
    """The current task image's tag; skips where dockerd is unavailable, fails where it runs but the
    image was not built. An edit of the client changes the tag: its thin layer is built here (seconds)
    when the dependencies' layer exists."""
    reason = docker_available()
    if reason is not None:
        pytest.skip(f"Docker tests skipped: {reason}")
    tags = task_image_tags.image_tags()
    if _has_image(tags.image):
        return tags.image
    if not _has_image(tags.deps):
        pytest.fail(f"the task image {tags.image} is not built: run `make task-image`")
    done = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0 or done.stdout.strip() != tags.image:
        pytest.fail(f"building the task image's client layer failed:\n{done.stderr[-3000:]}")
    return tags.image


def require_service_image() -> str:
    """The service image of this checkout (`make images`), built (reused by tag) when missing."""
    reason = docker_available()
    if reason is not None:
        pytest.skip(f"Docker tests skipped: {reason}")
    tag = service_image.image_tag()
    if _has_image(tag):
        return tag
    built = subprocess.run(
        [sys.executable, str(SERVICE_BUILD_SCRIPT)], capture_output=True, text=True, timeout=900, check=False
    )
    if built.returncode != 0:
        pytest.fail(f"building the service image failed:\n{built.stderr[-3000:]}")
    return built.stdout.strip()


@pytest.fixture(scope="session")
def task_image() -> Iterator[str]:
    """The task image's tag (cairn.task_image.image_tag()), built and present in dockerd."""
    yield require_task_image()
