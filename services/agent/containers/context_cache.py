"""The context archives (model definitions) this agent fetched, kept by their SHA-256.

Every trial of an experiment starts from the same archive, and the master names it in each start
(TaskSpec.context_digest): a start whose archive is kept here unpacks a copy of it instead of
fetching it again, a round trip to the master and its read of the stored archive off the path from
one trial's end to the next one's start. An archive is kept only once its bytes were checked
against the digest, so a kept archive is exactly what the master would send.

The folder is the agent's own (its work dir is owner-only); at most MAX_ARCHIVES archives and
MAX_BYTES are kept, the least recently used going first.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from pathlib import Path

MAX_ARCHIVES = 32
MAX_BYTES = 1 << 30
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_SUFFIX = ".tar.gz"


class ContextCache:
    def __init__(self, folder: Path, *, max_archives: int = MAX_ARCHIVES, max_bytes: int = MAX_BYTES) -> None:
        self._folder = folder
        self._max_archives = max_archives
        self._max_bytes = max_bytes
        # Start workers keep and take archives at once; each step is atomic on disk (links and
        # renames), the lock keeps the eviction's listing whole.
        self._lock = threading.Lock()

    def take(self, digest: str, destination: Path) -> bool:
        """Link the kept archive named `digest` to `destination` (the container's own name for
        it, which an eviction meanwhile leaves alone); False when none is kept."""
        kept = self._path(digest)
        if kept is None:
            return False
        with self._lock:
            try:
                os.utime(kept)  # recently used: evicted last
                # Last, so that a failure leaves no link behind: the fetch that follows writes its
                # file, and through a link it would write over the kept archive.
                os.link(kept, destination)
            except OSError:
                return False  # not kept, or not linkable there (another file system, say): fetch
        return True

    def keep(self, digest: str, archive: Path) -> None:
        """Keep `archive`, whose SHA-256 the caller checked to be `digest` (linked, not copied: the
        same file system). Nothing when it cannot be (the next start fetches again)."""
        kept = self._path(digest)
        if kept is None:
            return
        with self._lock:
            try:
                self._folder.mkdir(mode=0o700, exist_ok=True)
                staged = self._folder / f".{digest}.{uuid.uuid4().hex}"
                os.link(archive, staged)
                os.replace(staged, kept)
            except OSError:
                return
            self._evict()

    def _path(self, digest: str) -> Path | None:
        return self._folder / f"{digest}{_SUFFIX}" if _DIGEST.match(digest) else None

    def _evict(self) -> None:
        kept: list[tuple[float, int, Path]] = []
        for path in self._folder.glob(f"*{_SUFFIX}"):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            kept.append((stat.st_mtime, stat.st_size, path))
        kept.sort(reverse=True)  # the most recently used first
        total = 0
        for index, (_, size, path) in enumerate(kept):
            total += size
            if index > 0 and (index >= self._max_archives or total > self._max_bytes):
                path.unlink(missing_ok=True)
