"""A bounded number of followed log streams, each with a server thread of its own.

A followed stream (`logs -f`) holds one of the gRPC server's threads until its trial ends. They used
to come out of the same pool as every other call, so a few hundred followers left nothing for the
calls that keep the cluster going (trial reports, agent streams, logins): at 300 followers the
master answered nothing else. Now the pool is sized as the ordinary calls' threads plus one per
follower slot (app.py), and a follower past the last slot is refused at once with
RESOURCE_EXHAUSTED instead of queueing; so followers, however many, never take the threads other
calls need, and the thread count stays bounded by the two settings.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from services.master.domain.errors import ResourceExhausted


class FollowSlots:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free = threading.BoundedSemaphore(limit)

    @contextlib.contextmanager
    def hold(self, follow: bool) -> Iterator[None]:
        """A slot for the stream's lifetime when it follows (a plain read needs none)."""
        if not follow:
            yield
            return
        if not self._free.acquire(blocking=False):
            raise ResourceExhausted(
                f"follow: this master already serves {self.limit} followed log streams (its "
                "--max-log-followers): retry later, or read the logs without following"
            )
        try:
            yield
        finally:
            self._free.release()
