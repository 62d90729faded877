"""Checkpoints whose files are being deleted right now, so that none of them is registered in the
model registry meanwhile.

Deleting files (garbage collection, a user's DeleteCheckpoints) runs outside the master's lock:
storage can be slow. A deleter enters the fence with the checkpoints it may delete, THEN reads
which of them are registered in a unit of work, and leaves once their files and rows are dealt
with. A registration checks the fence inside its own unit of work, under the same lock: either it
commits before the deleter's read (and the deleter sees the version and keeps the checkpoint), or
it finds the fence held and waits for the deleter to finish. The model_versions foreign key stays
the last line of defence; this keeps it from ever being needed.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator


class DeletionFence:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._held: Counter[str] = Counter()

    @contextlib.contextmanager
    def deleting(self, checkpoint_uuids: Iterable[str]) -> Iterator[None]:
        uuids = set(checkpoint_uuids)
        with self._changed:
            self._held.update(uuids)
        try:
            yield
        finally:
            with self._changed:
                self._held.subtract(uuids)
                for uuid in uuids:
                    if self._held[uuid] <= 0:
                        del self._held[uuid]
                self._changed.notify_all()

    def held(self, checkpoint_uuid: str) -> bool:
        with self._changed:
            return self._held[checkpoint_uuid] > 0

    def wait_until_free(self, checkpoint_uuid: str, deadline: float) -> bool:
        """Whether the checkpoint is free of deleters before `deadline` (time.monotonic())."""
        with self._changed:
            return self._changed.wait_for(
                lambda: self._held[checkpoint_uuid] <= 0, timeout=max(0.0, deadline - time.monotonic())
            )


# One master process, one fence: every deleter and every registration of this process meets here.
CHECKPOINT_DELETIONS = DeletionFence()
