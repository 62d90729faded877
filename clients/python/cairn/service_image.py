"""The service image: one Docker image with an entry point per Cairn service (master, scheduler,
searcher, checkpoint, agent), what deploy/k8s/ runs, and its tag.

`make images` (scripts/build_service_image.py) builds it in two layers on the task image's Debian
base (cairn/task_image.py), each tagged by a hash of what it is built from, so a layer is built
once and reused by tag:

- deps: the base plus the build's Python interpreter at PYTHON_DIR and a venv at VENV holding the
  services' and the client's dependencies, pinned by constraints.txt, and the unprivileged user
  the services run as. Tagged by the base tag, those
  requirements and the constraints file.
- the image: deps plus the source (SOURCE_DIRS, and the built WebUI where there is one) copied to
  APP_DIR, with an entry point per service in BIN_DIR. Tagged by the deps tag and a hash of every
  copied file, so editing a service rebuilds only this layer.

Pure computation over the repository's files, like task_image: the tests ask `image_tags()` for
the tag the build makes.
"""

from __future__ import annotations

import platform
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cairn import task_image

REPOSITORY = "cairn-service"
DEPS_REPOSITORY = "cairn-service-deps"
LATEST_TAG = f"{REPOSITORY}:latest"

# The interpreter: the build's own Python (the one `make install` builds .venv on), copied in without
# its site-packages. Debian 12's python3 is 3.11.2, and the agent unpacks model definitions with
# tarfile's extraction filters, which came in 3.11.4.
PYTHON_DIR = "/opt/cairn/python"
MIN_PYTHON = (3, 11, 4)
VENV = "/opt/cairn/venv"
APP_DIR = "/opt/cairn/app"
BIN_DIR = "/opt/cairn/bin"
# The services' user: not root, and a uid no distribution account takes (Kubernetes' runAsUser).
USER_NAME = "cairn"
USER_ID = 10001
# Bump when the build steps change in a way the hashed inputs do not show.
RECIPE_VERSION = "2"

# Each entry point: the command deploy/k8s runs, and the module it starts.
ENTRY_POINTS = {
    "cairn-master": "services.master",
    "cairn-master-migrate": "services.master.migrate",
    "cairn-scheduler": "services.scheduler",
    "cairn-searcher": "services.searcher",
    "cairn-checkpoint": "services.checkpoint",
    "cairn-agent": "services.agent",
    "cairn-probe": "services.probe",
    "cairn": "cairn.cli.main",
}

# Copied into APP_DIR as they lie in the checkout (the master finds webui/dist beside services/).
SOURCE_DIRS = (Path("services"), Path("clients/python/cairn"))
WEBUI_DIST = Path("webui/dist")
_SOURCE_SUFFIXES = (".py", ".pyi", ".json", ".ini", ".mako", ".typed")

LABEL_RECIPE = "ai.cairn.service-image.recipe"
LABEL_CONTENTS = "ai.cairn.service-image.contents"
LABEL_PACKAGES = "ai.cairn.service-image.packages"
LABEL_SOURCE_HASH = "ai.cairn.service-image.source-hash"


class ServiceImageError(ValueError):
    """The repository's inputs to the service image are missing or malformed."""


@dataclass(frozen=True)
class ServiceImageTags:
    base: str
    deps: str
    image: str
    source_hash: str


def project_dependencies(repo_root: Path) -> tuple[str, ...]:
    """The services' dependencies (pyproject.toml) without the Cairn client itself, then the
    client's (clients/python/pyproject.toml): what the deps layer installs."""
    services = _dependencies(repo_root / "pyproject.toml")
    client = _dependencies(repo_root / task_image.CLIENT_DIR / "pyproject.toml")
    return tuple(d for d in services if d.split(">")[0].split("=")[0].strip() != "cairn") + client


def _dependencies(path: Path) -> tuple[str, ...]:
    try:
        project = tomllib.loads(path.read_text()).get("project", {})
    except (FileNotFoundError, tomllib.TOMLDecodeError) as e:
        raise ServiceImageError(f"{path}: {e}")
    deps = project.get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise ServiceImageError(f"{path}: project.dependencies must be a list of strings")
    return tuple(deps)


def constraints_text(repo_root: Path) -> str:
    path = repo_root / "constraints.txt"
    try:
        return path.read_text()
    except FileNotFoundError:
        raise ServiceImageError(f"{path}: not found (the versions the image's packages are pinned to)")


def source_files(repo_root: Path) -> Iterator[Path]:
    """Every file copied into the image, relative to REPO_ROOT, in a stable order: the services'
    and the client's Python (generated stubs included), their data files, and the built WebUI."""
    for top in SOURCE_DIRS:
        root = repo_root / top
        if not root.is_dir():
            raise ServiceImageError(f"{root}: not found")
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(repo_root)
            if any(p == "__pycache__" or p.startswith(".") or p.endswith(".egg-info") for p in rel.parts):
                continue
            if path.is_file() and path.name.endswith(_SOURCE_SUFFIXES):
                yield rel
    dist = repo_root / WEBUI_DIST
    if (dist / "index.html").is_file():
        yield from (p.relative_to(repo_root) for p in sorted(dist.rglob("*")) if p.is_file())


def source_hash(repo_root: Path) -> str:
    parts: list[str | bytes] = []
    for rel in source_files(repo_root):
        parts += [rel.as_posix(), (repo_root / rel).read_bytes()]
    return task_image._digest(parts)


def interpreter_identity() -> str:
    """The build's Python, as the deps layer copies it: its version and where it lies."""
    return f"{platform.python_version()} {sys.base_prefix}"


def deps_tag(repo_root: Path) -> str:
    digest = task_image._digest(
        [
            RECIPE_VERSION,
            task_image.base_tag(),
            interpreter_identity(),
            VENV,
            USER_NAME,
            str(USER_ID),
            *project_dependencies(repo_root),
            constraints_text(repo_root),
        ]
    )
    return f"{DEPS_REPOSITORY}:{digest[:16]}"


def source_image_tag(deps: str, digest: str) -> str:
    """The image's tag: its deps layer's, the hash of its source and its entry points."""
    entry_points = [f"{name}={module}" for name, module in sorted(ENTRY_POINTS.items())]
    return f"{REPOSITORY}:{task_image._digest([RECIPE_VERSION, deps, digest, *entry_points])[:16]}"


def image_tags(repo_root: Path | None = None) -> ServiceImageTags:
    root = repo_root or task_image.default_repo_root()
    deps = deps_tag(root)
    digest = source_hash(root)
    return ServiceImageTags(
        base=task_image.base_tag(), deps=deps, image=source_image_tag(deps, digest), source_hash=digest
    )


def image_tag(repo_root: Path | None = None) -> str:
    return image_tags(repo_root).image
