"""The folders of the agent's machine a task's absolute bind mount may not cover on the process
runtime. A Docker container binds in a root filesystem of its own; a process-runtime task binds in
its own mount namespace but on the host's filesystem, where its command (the privilege drop
included) runs from these folders before it is the task user's: a bind over /usr/bin or /etc would
put the task's files under root's feet. Everything else (/data, /mnt/x, /opt/y, /root/.cache, ...)
may be bound, as in a container (a target that does not exist yet is made, empty, as the mount
point: it stays on the host, as a container's would stay in its image's layer)."""

from __future__ import annotations

import os

SYSTEM_FOLDERS = (
    "/bin",
    "/sbin",
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/boot",
    "/var/lib/cairn",
)


def covered_system_folder(target: str) -> str | None:
    """The system folder that binding on `target` would cover or reach into, as written or once
    the links on its way are followed (mount follows them); None when none."""
    for path in (os.path.normpath(target), os.path.realpath(target)):
        if path == "/":
            return "/"
        for folder in SYSTEM_FOLDERS:
            if path == folder or path.startswith(folder + "/"):
                return folder
    return None
