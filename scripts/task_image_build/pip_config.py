"""This machine's pip configuration, carried into a build container so pip there finds packages as
pip here does: the same indexes, find-links (e.g. /opt/wheels with the local PyTorch wheel),
constraints and CA bundle (a proxy's, where HTTPS goes through one).

pip's own view of its configuration (`pip config list`, every file and PIP_* variable merged) is
written into one file the container's pip reads through PIP_CONFIG_FILE. Every local path it names
is mounted read-only under HOST_PREFIX and named by that path in the file, so the mounts shadow
nothing in the image and leave nothing behind outside the build's own folder."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from task_image_build.docker_cli import BuildError

# The build's own folder in a build container.
BUILD_DIR = "/tmp/cairn-build"
CONTAINER_CONFIG_FILE = f"{BUILD_DIR}/pip.conf"
# This machine's paths appear at HOST_PREFIX + path.
HOST_PREFIX = f"{BUILD_DIR}/host"
# A local index's pages link to files beside it (/opt/pypi/simple -> ../../files/...).
_INDEX_OPTIONS = {"index-url", "extra-index-url"}


@dataclass(frozen=True)
class PipConfig:
    # Merged configuration, its local paths already named as the container sees them:
    # section -> option -> value (pip's ini format).
    sections: dict[str, dict[str, str]]
    # (this machine's path, the container's path) for each read-only mount.
    mounts: tuple[tuple[Path, str], ...]

    def ini_text(self) -> str:
        lines: list[str] = []
        for section, options in sorted(self.sections.items()):
            lines.append(f"[{section}]")
            lines += [f"{name} = {value}" for name, value in sorted(options.items())]
            lines.append("")
        return "\n".join(lines)

    def docker_mounts(self, config_file: Path) -> list[str]:
        args = ["-v", f"{config_file}:{CONTAINER_CONFIG_FILE}:ro"]
        for source, target in self.mounts:
            args += ["-v", f"{source}:{target}:ro"]
        return args


def _config_entries(python: str) -> list[tuple[str, str]]:
    """(key, value) pairs from `pip config list`: "global.find-links" or ":env:.find-links"."""
    done = subprocess.run(
        [python, "-m", "pip", "config", "list"], check=False, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise BuildError(f"pip config list failed: {done.stderr.strip()}")
    entries = []
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise BuildError(f"pip config list: cannot read the line {line!r}")
        entries.append((key, str(parsed)))
    return entries


def _local_path(token: str) -> tuple[Path, str] | None:
    """(path, how to write it back) for a token that names a local file or folder."""
    if token.startswith("file://"):
        return Path(unquote(urlparse(token).path)), "file://"
    if token.startswith("/"):
        return Path(token), ""
    return None


def host_pip_config(python: str = sys.executable) -> PipConfig:
    sections: dict[str, dict[str, str]] = {}
    mounts: dict[Path, str] = {}
    for key, value in _config_entries(python):
        section, _, option = key.rpartition(".")
        # ":env:" entries are PIP_* variables: pip puts them in the "global" section.
        section = "global" if section == ":env:" else section
        # The container's config file replaces this machine's files; naming one would loop back.
        if option == "config-file":
            continue
        tokens = []
        for token in value.split():
            local = _local_path(token)
            if local is None or not local[0].exists() or local[0] == Path("/"):
                tokens.append(token)
                continue
            path, scheme = local
            mounted = path.parent if option in _INDEX_OPTIONS else path
            mounts[mounted.resolve()] = f"{HOST_PREFIX}{mounted}"
            tokens.append(f"{scheme}{HOST_PREFIX}{path}")
        sections.setdefault(section, {})[option] = " ".join(tokens)
    return PipConfig(sections, tuple(sorted(mounts.items())))


def container_environment() -> dict[str, str]:
    """What the build container's pip needs in its environment; PIP_* variables are left out (their
    values are in the merged file, and a PIP_CONFIG_FILE of this machine would shadow it)."""
    return {"PIP_CONFIG_FILE": CONTAINER_CONFIG_FILE, "PIP_NO_INPUT": "1"}
