"""Riding out a database outage: a call that a lost connection interrupted runs again, on a fresh
connection, with growing pauses, for a bounded time; then it fails with DatabaseUnavailable, which
callers see as UNAVAILABLE (and retry on their side).

Running a call again is safe only if its first run stored nothing. The store counts the commits
of each thread, and says when a lost connection hit the COMMIT itself (`commit_unknown`): a call
that committed part of its work, or whose commit is in doubt, runs again only if the caller says it
is idempotent (metric reports carry sequence numbers, agent messages are applied once per seq).
Everything else reaches its caller as UNAVAILABLE with `commit_unknown` set, for the caller to
decide.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from services.common.logging import get_logger
from services.master.domain.kernel.errors import DatabaseUnavailable, Unavailable
from services.master.store.outages import commits_on_this_thread, is_disconnect

log = get_logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class OutagePolicy:
    # A PostgreSQL restart (stop, start, crash recovery) takes seconds to tens of seconds: a call
    # waits this long in all before its caller hears UNAVAILABLE.
    budget_s: float = 40.0
    first_delay_s: float = 0.2
    # Short enough that a call resumes within a few seconds of the server's return.
    max_delay_s: float = 3.0

    def delays(self) -> Iterator[float]:
        """Doubling pauses, capped, with jitter so that the calls an outage held do not all come
        back in the same instant."""
        delay = self.first_delay_s
        while True:
            yield delay * random.uniform(0.8, 1.2)
            delay = min(delay * 2, self.max_delay_s)


OUTAGE_POLICY = OutagePolicy()


def as_outage(exc: BaseException) -> DatabaseUnavailable | None:
    """`exc` as a DatabaseUnavailable, if it is one; a raw lost-connection error that escaped the
    store's sessions is one too, but where it struck is unknown, so its commit is in doubt."""
    if isinstance(exc, DatabaseUnavailable):
        return exc
    if isinstance(exc, Unavailable):
        return None  # another service is down, not the database: not ours to replay
    if is_disconnect(exc):
        return DatabaseUnavailable(f"the database is unavailable: {exc}", commit_unknown=True)
    return None


def ride_out(
    call: Callable[[], T],
    *,
    what: str,
    idempotent: bool = False,
    policy: OutagePolicy | None = None,
    stopping: threading.Event | None = None,
    waiting: Callable[[], None] | None = None,
) -> T:
    """Run `call`, running it again while a database outage interrupts it and running it again is
    safe (see the module's note), until `policy.budget_s` has passed since the first run.

    `stopping` ends the pauses early (the master is stopping); `waiting` is called before each
    pause (a stream reader uses it to show that it is busy, not dead). The policy defaults to
    OUTAGE_POLICY, read at each call."""
    policy = policy or OUTAGE_POLICY
    started = time.monotonic()
    delays = policy.delays()
    runs = 0
    while True:
        runs += 1
        commits_before = commits_on_this_thread()
        try:
            return call()
        except Exception as exc:
            outage = as_outage(exc)
            if outage is None:
                raise
            if commits_on_this_thread() != commits_before and not outage.commit_unknown:
                outage = DatabaseUnavailable(
                    f"{outage} (part of this call was stored before the connection was lost)",
                    commit_unknown=True,
                )
            if outage.commit_unknown and not idempotent:
                log.warning("database outage; not repeating a call that may have been stored", what=what)
                if outage is exc:
                    raise
                raise outage from exc
            delay = next(delays)
            elapsed = time.monotonic() - started
            if elapsed + delay > policy.budget_s or (stopping is not None and stopping.is_set()):
                raise DatabaseUnavailable(
                    f"{what}: {outage}; gave up after {runs} tries over {elapsed:.0f} s",
                    commit_unknown=outage.commit_unknown,
                ) from exc
            log.warning(
                "database outage; trying again",
                what=what,
                attempt=runs,
                in_s=round(delay, 2),
                error=str(outage),
            )
            if waiting is not None:
                waiting()
            if stopping is not None:
                stopping.wait(delay)
            else:
                time.sleep(delay)
