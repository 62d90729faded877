"""The agent's work directory: one agent process at a time (a lock file), containers below it.
The layout is cairn.agent_files (shared with `cairn cluster down`'s sweep)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from cairn.agent_files import WorkDirPaths


class WorkDirBusyError(RuntimeError):
    pass


class WorkDir:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.layout = WorkDirPaths(root)
        self.containers = self.layout.containers
        # The context archives kept by digest (containers/context_cache.py).
        self.contexts = root / "contexts"
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Take the work dir for this process; WorkDirBusyError when another agent holds it."""
        self.containers.mkdir(parents=True, exist_ok=True)
        # Containers' bookkeeping holds their tasks' environments (allocation tokens): owner only.
        os.chmod(self.root, 0o700)
        path = self.layout.lock_file
        # Not inheritable (Python's default), so the shims never keep the lock after the agent dies.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise WorkDirBusyError(
                f"--work-dir {self.root}: another agent (pid {holder}) is using it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
