"""The task image: the Docker image trials run in under the agent's Docker runtime, and its tag.

`make task-image` (scripts/build_task_image.py) builds it in three layers, each tagged by a hash of
what it is built from, so a layer is built once and reused by tag:

- base: a Debian root filesystem (debootstrap, minbase) with Python 3.11 and venv, imported into
  Docker. Tagged by the suite, the package list and the recipe version.
- deps: the base plus a venv at VENV holding requirements-task.txt (the one list of what trials run
  with) and the Cairn client's own dependencies. Tagged by the base tag and those requirements.
- the task image: deps plus the Cairn client (clients/python) installed without dependencies.
  Tagged by the deps tag and a hash of the client's source, so editing the client rebuilds only
  this thin layer.

Everything here is pure computation over the repository's files: the agent, `cairn cluster up` and
the tests ask `image_tag()` for the default image and get the tag the build script makes.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = "cairn-task"
BASE_REPOSITORY = "cairn-task-base"
DEPS_REPOSITORY = "cairn-task-deps"
# Also given to the task image the build last made or found: the image of an agent that cannot
# compute the tag (installed without the repository the tag is hashed from).
LATEST_TAG = f"{REPOSITORY}:latest"

DEBIAN_SUITE = "bookworm"
# Python 3.11 and venv; libstdc++ and libgomp for PyTorch's and scikit-learn's native code.
DEBIAN_PACKAGES = ("python3", "python3-venv", "ca-certificates", "libstdc++6", "libgomp1")
# The venv trials' `python3` comes from (first on the image's PATH).
VENV = "/opt/cairn-task"
# Determined's working directory for task containers (DET_WORKDIR's default).
WORKDIR = "/run/determined/workdir"
# Bump when the build steps change in a way the hashed inputs do not show.
RECIPE_VERSION = "3"

# The label every image and build container of this recipe carries (the build script and tests find
# theirs by it), and the labels that say what an image holds.
LABEL_RECIPE = "ai.cairn.task-image.recipe"
LABEL_CONTENTS = "ai.cairn.task-image.contents"
LABEL_PACKAGES = "ai.cairn.task-image.packages"
LABEL_CLIENT_HASH = "ai.cairn.task-image.client-source-hash"
LABEL_DEPS_IMAGE = "ai.cairn.task-image.deps-image"
LABEL_BASE_IMAGE = "ai.cairn.task-image.base-image"

REQUIREMENTS_FILE = "requirements-task.txt"
CLIENT_DIR = Path("clients/python")

# Not part of the client's source: caches and build outputs that pip or the tools leave beside it.
_IGNORED_DIRS = {"__pycache__", "build", "dist"}
_IGNORED_SUFFIXES = (".pyc", ".pyo")


class TaskImageError(ValueError):
    """The repository's inputs to the task image are missing or malformed."""


@dataclass(frozen=True)
class TaskRequirements:
    """What the deps layer installs: requirements-task.txt without the Cairn client, plus the
    client's declared dependencies (the client itself goes into the layer above)."""

    packages: tuple[str, ...]
    client_dependencies: tuple[str, ...]

    def all(self) -> tuple[str, ...]:
        return self.packages + self.client_dependencies


@dataclass(frozen=True)
class TaskImageTags:
    base: str
    deps: str
    image: str
    # The client's source hash the image's tag was computed from.
    client_hash: str


def default_repo_root() -> Path:
    """The checkout this module lives in (clients/python/cairn/task_image.py)."""
    return Path(__file__).resolve().parents[3]


def _digest(parts: Iterable[str | bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        # Length-prefixed so ("ab", "c") and ("a", "bc") hash differently.
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def _is_client_line(line: str, repo_root: Path) -> bool:
    target = line.removeprefix("-e").strip()
    return (repo_root / target).resolve() == (repo_root / CLIENT_DIR).resolve()


def read_requirements(repo_root: Path) -> TaskRequirements:
    path = repo_root / REQUIREMENTS_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise TaskImageError(f"{path}: not found (the task image's package list)")
    packages: list[str] = []
    has_client = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if _is_client_line(line, repo_root):
            has_client = True
        elif line.startswith("-"):
            raise TaskImageError(
                f"{path}:{number}: {line!r}: only package requirements and the Cairn client "
                f"({CLIENT_DIR}) can be built into the task image; pip options belong in pip's "
                "configuration"
            )
        else:
            packages.append(line)
    if not has_client:
        raise TaskImageError(f"{path}: the Cairn client ({CLIENT_DIR}) is not listed")
    return TaskRequirements(tuple(packages), read_client_dependencies(repo_root))


def read_client_dependencies(repo_root: Path) -> tuple[str, ...]:
    path = repo_root / CLIENT_DIR / "pyproject.toml"
    try:
        project = tomllib.loads(path.read_text()).get("project", {})
    except (FileNotFoundError, tomllib.TOMLDecodeError) as e:
        raise TaskImageError(f"{path}: {e}")
    deps = project.get("dependencies", [])
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise TaskImageError(f"{path}: project.dependencies must be a list of strings")
    return tuple(deps)


def client_source_files(client_dir: Path) -> Iterator[Path]:
    """Every file the client's install is made from, in a stable order. Generated stubs count
    (they are part of the installed package); caches and build outputs do not."""
    for path in sorted(client_dir.rglob("*")):
        rel = path.relative_to(client_dir)
        if any(
            part in _IGNORED_DIRS or part.endswith(".egg-info") or part.startswith(".") for part in rel.parts
        ):
            continue
        if path.is_file() and not path.name.endswith(_IGNORED_SUFFIXES):
            yield path


def client_source_hash(repo_root: Path) -> str:
    client_dir = repo_root / CLIENT_DIR
    if not (client_dir / "pyproject.toml").is_file():
        raise TaskImageError(f"{client_dir}: not the Cairn client (no pyproject.toml)")
    parts: list[str | bytes] = []
    for path in client_source_files(client_dir):
        parts += [path.relative_to(client_dir).as_posix(), path.read_bytes()]
    return _digest(parts)


def base_tag() -> str:
    digest = _digest([RECIPE_VERSION, DEBIAN_SUITE, *DEBIAN_PACKAGES])
    return f"{BASE_REPOSITORY}:{DEBIAN_SUITE}-{digest[:12]}"


def deps_tag(requirements: TaskRequirements) -> str:
    digest = _digest([RECIPE_VERSION, base_tag(), VENV, *requirements.all()])
    return f"{DEPS_REPOSITORY}:{digest[:16]}"


def image_tags(repo_root: Path | None = None) -> TaskImageTags:
    root = repo_root or default_repo_root()
    deps = deps_tag(read_requirements(root))
    client_hash = client_source_hash(root)
    image = f"{REPOSITORY}:{_digest([RECIPE_VERSION, deps, client_hash])[:16]}"
    return TaskImageTags(base=base_tag(), deps=deps, image=image, client_hash=client_hash)


def image_tag(repo_root: Path | None = None) -> str:
    """The task image for this checkout: the Docker runtime's default `environment.image`."""
    return image_tags(repo_root).image
