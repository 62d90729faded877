"""The docker CLI, as the build uses it: `import`, `run` and `commit` are what a registry-free build
needs, and the CLI shows a person exactly what ran."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence


class BuildError(RuntimeError):
    """A build step failed; the message says which and why."""


def docker(args: Sequence[str], *, capture: bool = True) -> str:
    """Runs `docker ARGS`; returns its stdout when captured. Without capture, stdout and stderr go to
    this process's (a long step's progress)."""
    try:
        done = subprocess.run(
            ["docker", *args],
            check=False,
            text=True,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
        )
    except FileNotFoundError:
        raise BuildError("the docker CLI is not installed (Debian: apt-get install docker.io)")
    if done.returncode != 0:
        detail = (done.stderr or "").strip()[-2000:] if capture else "see the output above"
        raise BuildError(f"docker {args[0]} failed (exit {done.returncode}): {detail}")
    return done.stdout or ""


def image_exists(tag: str) -> bool:
    done = subprocess.run(["docker", "image", "inspect", tag], check=False, capture_output=True)
    return done.returncode == 0


def remove_container(name: str) -> None:
    subprocess.run(["docker", "rm", "-f", name], check=False, capture_output=True)


def dockerfile_string(value: str) -> str:
    """VALUE as a double-quoted string for a Dockerfile instruction given to `--change`."""
    if any(c in value for c in '"\\\n'):
        raise BuildError(f"cannot put {value!r} in an image label (quotes, backslashes, newlines)")
    return f'"{value}"'
