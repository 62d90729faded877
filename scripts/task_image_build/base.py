"""The base layer: a Debian root filesystem made by debootstrap and imported into Docker (no image can
be pulled here). debootstrap takes about half a minute, so its tarball is cached (one, the current
recipe's): a removed base image is re-imported in seconds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from cairn import task_image
from task_image_build.docker_cli import BuildError, docker, dockerfile_string

DEFAULT_MIRROR = "http://deb.debian.org/debian"
# What debootstrap downloads to install, and apt's package lists: useless in an image without apt runs.
_APT_LEFTOVERS = ("var/cache/apt", "var/lib/apt/lists")


def rootfs_tarball(tag: str, cache_dir: Path) -> Path:
    """The cached root filesystem for base TAG, made with debootstrap when missing."""
    tarball = cache_dir / f"{tag.replace(':', '-')}.tar"
    if tarball.exists():
        return tarball
    if os.geteuid() != 0:
        raise BuildError(f"debootstrap needs root to make {tarball}: run `make task-image` as root")
    if shutil.which("debootstrap") is None:
        raise BuildError("debootstrap is not installed (Debian: apt-get install debootstrap)")
    mirror = os.environ.get("CAIRN_DEBIAN_MIRROR", DEFAULT_MIRROR)
    cache_dir.mkdir(parents=True, exist_ok=True)
    rootfs = cache_dir / f"rootfs.{os.getpid()}"
    partial = tarball.with_suffix(f".tar.{os.getpid()}")
    try:
        print(f"task image: debootstrap {task_image.DEBIAN_SUITE} from {mirror}", file=sys.stderr)
        try:
            _run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(task_image.DEBIAN_PACKAGES)}",
                    task_image.DEBIAN_SUITE,
                    str(rootfs),
                    mirror,
                ]
            )
        except BuildError as e:
            # Its log lies in the root filesystem, which is removed below.
            log = rootfs / "debootstrap" / "debootstrap.log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise BuildError(f"{e}\n{tail}")
        for leftover in _APT_LEFTOVERS:
            for entry in (rootfs / leftover).glob("**/*"):
                if entry.is_file():
                    entry.unlink()
        _run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."])
        partial.rename(tarball)  # complete tarballs only, even if two builds race
        # Older recipes' tarballs: the cache keeps one base.
        for old in cache_dir.glob(f"{task_image.BASE_REPOSITORY}-*.tar"):
            if old != tarball:
                old.unlink(missing_ok=True)
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
        partial.unlink(missing_ok=True)
    return tarball


def import_base(tag: str, cache_dir: Path) -> None:
    tarball = rootfs_tarball(tag, cache_dir)
    contents = f"Debian {task_image.DEBIAN_SUITE} minbase with {' '.join(task_image.DEBIAN_PACKAGES)}"
    docker(
        [
            "import",
            "--change",
            "ENV LANG=C.UTF-8",
            "--change",
            'CMD ["/bin/bash"]',
            "--change",
            f"LABEL {task_image.LABEL_RECIPE}={dockerfile_string(task_image.RECIPE_VERSION)}",
            "--change",
            f"LABEL {task_image.LABEL_CONTENTS}={dockerfile_string(contents)}",
            str(tarball),
            tag,
        ]
    )


def _run(args: list[str]) -> None:
    # Progress goes to stderr: stdout is kept for the tag the build prints.
    done = subprocess.run(args, check=False, stdout=sys.stderr)
    if done.returncode != 0:
        raise BuildError(f"{args[0]} failed (exit {done.returncode}); see the output above")
