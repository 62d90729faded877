"""Many small units of work from many threads, committed together (a group commit of units).

Each agent's stream applies its messages in order, and each message (a
container's state change, a refused start) is a unit of work of its own. At a thousand agents that
was a thousand transactions a second, one after another under the master's lock, each paying for
its lock, its BEGIN and COMMIT (an fsync on SQLite, round trips on PostgreSQL) and its post-commit
wake-ups. Here the units asked for while a batch is applied are applied together in the next one
(group_commit.py says how, and what a caller keeps: order, all-or-nothing then each alone, outages).

Within a batch's unit of work, post-commit effects run after the one commit; checks owed once per
key before the commit (Work.once_before_commit) run once for the batch; and `prepare` reads up
front, in one statement, what each unit would read on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from typing import Any, NamedTuple, TypeVar, cast

from services.master.domain.kernel.context import MasterContext, Work
from services.master.domain.kernel.group_commit import GroupCommit, GroupStats, Lane

T = TypeVar("T")

# Enough that the batches keep up with a thousand agents' reports at 500 starts a second (a
# RUNNING and a TERMINATED each). While an agent's stream reader awaited each report, a batch took
# at most one of each agent, and batches of 256 fell behind (reports stored 8-9 s p50 after they
# were sent; 1,024 halved it). With an agent's reports in flight together
# (servicers/agent_reports.py) 256 and 1,024 did the same on SQLite, while on PostgreSQL, whose
# statements cost more, 256 fell behind again (reports p50 9.8 against 3.5 s): bench/README.md,
# "An agent's reports in flight at once". Few enough that a batch holds the master's lock for a
# fraction of a second on SQLite (a unit costs about 0.2 ms of CPU).
MAX_BATCH = 1024


class _Unit(NamedTuple):
    apply: Callable[[Work], object]
    # What the unit is about, handed with the batch's others to `prepare` (a container's report).
    key: Hashable | None


class BatchedUnits:
    """`prepare`, if given, runs first in each batch of two or more units, with the keys the units
    were run with: it reads what they will need into the session and Work.memo."""

    def __init__(
        self,
        ctx: MasterContext,
        max_batch: int = MAX_BATCH,
        prepare: Callable[[Work, list[Hashable]], None] | None = None,
        purpose: str | None = None,
    ) -> None:
        self._ctx = ctx
        self._prepare = prepare
        # What its batches' holds of the master's lock are counted under (context.unit_of_work).
        self._purpose = purpose or "kernel.batched_units"
        self._commits: GroupCommit[_Unit, object] = GroupCommit(self._apply, max_batch)

    @property
    def stats(self) -> GroupStats:
        return self._commits.stats

    @property
    def queued(self) -> int:
        return self._commits.queued

    @property
    def idle(self) -> bool:
        return self._commits.idle

    def run(self, apply: Callable[[Work], T], key: Hashable | None = None) -> T:
        """Apply `apply` in a unit of work shared with whatever other threads asked at the same
        time; its result, or its error, as if it had run alone."""
        return cast(T, self._commits.run(_Unit(cast(Callable[[Work], Any], apply), key)))

    async def run_async(
        self, apply: Callable[[Work], T], executor: Executor, key: Hashable | None = None
    ) -> T:
        """`run` awaited on an event loop (group_commit.py's run_async): the batch is applied in
        `executor`, and no thread waits for this unit's outcome."""
        unit = _Unit(cast(Callable[[Work], Any], apply), key)
        return cast(T, await self._commits.run_async(unit, executor))

    def submit_async(
        self, apply: Callable[[Work], object], executor: Executor, key: Hashable | None, lane: Lane
    ) -> asyncio.Future[object]:
        """Queue `apply` from a coroutine on the running loop, in `lane` (group_commit.py): the
        future of its outcome; the caller may queue more before it comes."""
        return self._commits.submit_async(_Unit(apply, key), executor, lane)

    def _apply(self, units: Sequence[_Unit]) -> list[object]:
        with self._ctx.unit_of_work(purpose=self._purpose) as w:
            if self._prepare is not None and len(units) > 1:
                self._prepare(w, [unit.key for unit in units if unit.key is not None])
            return [unit.apply(w) for unit in units]
