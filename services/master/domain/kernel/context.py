"""What the master's domain modules share: settings, database, clients, and units of work.

A unit of work is one database transaction plus the side effects that must only happen once it has
committed (commands to agents, wake-ups of streams and loops). All state transitions run inside
one, under one process-wide lock, so two events about the same trial never interleave.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from services.common.logging import get_logger
from services.master.configuration.settings import Settings
from services.master.domain.kernel.fair_shares import FairShareDivisions
from services.master.domain.kernel.idle_clock import IdleClock
from services.master.domain.kernel.intake_order import IntakeOrder
from services.master.domain.kernel.metric_inserts import MetricInserts
from services.master.domain.kernel.telemetry import Telemetry
from services.master.domain.kernel.topics import Topics
from services.master.store import models
from services.master.store.db import Database

if TYPE_CHECKING:
    from services.master.domain.kernel.ports import Scheduler, Searchers
    from services.master.domain.scheduling.agent_hub import AgentHub

log = get_logger(__name__)

# How many units of work this thread is inside (MasterContext.unit_of_work times the outermost).
_units_held = threading.local()

# Raised where an ending finds no hook to tell: the master (or a test) skipped wiring.connect(ctx).
NOT_CONNECTED = "the master's lifecycles are not connected: call wiring.connect(ctx) at start-up"


_MASTER_PACKAGE = "services.master."


@functools.lru_cache(maxsize=512)
def _module_purpose(module: str) -> str:
    """A module's name as a unit's purpose: relative to the master's package, and to its domain
    (`experiments.creation`, `servicers.api.experiments`)."""
    relative = module.removeprefix(_MASTER_PACKAGE)
    return relative.removeprefix("domain.") or "unknown"


@dataclass
class Work:
    session: Session
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    # Run once the transaction is over, committed or rolled back (the lock still held).
    at_end: list[Callable[[], None]] = field(default_factory=list)
    # Checks owed before the commit, once per key however often they are owed (settle()).
    before_commit: dict[object, Callable[[], None]] = field(default_factory=dict)
    # What was read up front for the whole unit, by its reader's key (a batch of agents' reports
    # reads all their containers in one statement: allocations/containers.preload).
    memo: dict[object, object] = field(default_factory=dict)

    def later(self, effect: Callable[[], None]) -> None:
        self.after_commit.append(effect)

    def finally_(self, effect: Callable[[], None]) -> None:
        """Run `effect` when the transaction is over, whether it committed or not."""
        self.at_end.append(effect)

    def once_before_commit(self, key: object, check: Callable[[], None]) -> None:
        """Run `check` in this transaction just before it commits, once for `key`: a check that
        many changes owe (does the experiment end, now that a trial has?) runs once for all of
        them, so a unit that ends 10,000 trials asks once, not 10,000 times."""
        self.before_commit.setdefault(key, check)

    def settle(self) -> None:
        """Run the owed checks (a check may owe more) until none is left."""
        while self.before_commit:
            key = next(iter(self.before_commit))
            self.before_commit.pop(key)()


class StripedLocks:
    """A fixed set of locks chosen by key: work on one key (a trial) is serialized, work on
    different keys mostly runs side by side, and the set never grows."""

    def __init__(self, stripes: int = 64) -> None:
        self._locks = [threading.Lock() for _ in range(stripes)]

    def of(self, key: Hashable) -> threading.Lock:
        return self._locks[hash(key) % len(self._locks)]


class Wakeup:
    """A flag plus an event: loops sleep until woken or until their period passes."""

    def __init__(self) -> None:
        self._event = threading.Event()
        # How many times it was set: a loop can tell whether anything asked for it since it looked.
        self.generation = 0

    def set(self) -> None:
        self.generation += 1
        self._event.set()

    def wait(self, timeout: float) -> None:
        self._event.wait(timeout)
        self._event.clear()


@dataclass
class MasterContext:
    """Shared by the domain modules. `data_changed` must follow every commit that changes what the
    API reads: units of work do it themselves."""

    settings: Settings
    db: Database
    searchers: Searchers
    scheduler: Scheduler
    hub: AgentHub
    master_id: str
    cluster_id: str
    topics: Topics = field(default_factory=Topics)
    lock: threading.RLock = field(default_factory=threading.RLock)
    scheduler_wakeup: Wakeup = field(default_factory=Wakeup)
    pump_wakeup: Wakeup = field(default_factory=Wakeup)
    # Wakes the webhook sender when an event was owed (domain/webhooks/outbox.py).
    webhook_wakeup: Wakeup = field(default_factory=Wakeup)
    stopping: threading.Event = field(default_factory=threading.Event)
    # Notebooks' idle reports (notebook_idle.py).
    idle_clock: IdleClock = field(default_factory=IdleClock)
    # Bumped after every committed change the API can read (see servicers/read_cache.py).
    data_version: int = 0
    # Bumped after every committed change to who may do what (role assignments, group members,
    # workspaces): identity/grants.py keeps each user's grants while it stays the same.
    access_version: int = 0
    # The master's own measurements, for /metrics (telemetry.py).
    telemetry: Telemetry = field(default_factory=Telemetry.new)
    # Each fair-share pool's division at its last pass, as the scheduler reported it.
    fair_shares: FairShareDivisions = field(default_factory=FairShareDivisions)
    # Per-trial locks for the work that may run beside the process-wide lock (metric intake of
    # training reports on PostgreSQL: metrics/intake.py says why it is safe there).
    trial_locks: StripedLocks = field(default_factory=StripedLocks)
    # Metric inserts not committed yet, for readers that go on from the highest id they read
    # (metric_inserts.py).
    metric_inserts: MetricInserts = field(default_factory=MetricInserts)
    # The highest metric sequence number stored per trial run, for batches sent before the last
    # was answered (intake_order.py).
    intake_order: IntakeOrder = field(default_factory=IntakeOrder)
    # Endings travel up through hooks registered at start-up (wiring.py), while commands go down
    # (experiment -> trial -> allocation): so the lifecycle modules never import their owners.
    # Run inside the transaction that ends an allocation, with its outcome (allocations.Outcome).
    allocation_exit_hooks: list[Callable[[Work, models.Allocation, str], None]] = field(default_factory=list)
    # Run inside the transaction that ends a trial.
    trial_end_hooks: list[Callable[[Work, models.Trial], None]] = field(default_factory=list)
    # Run before a deleted experiment's rows go (checkpoint files); raise to keep the rows.
    experiment_delete_hooks: list[Callable[[int], None]] = field(default_factory=list)

    def data_changed(self) -> None:
        # A plain increment is atomic enough here: readers only compare for equality, and a lost
        # race between two writers still moves the version away from what any reader cached.
        self.data_version += 1

    def access_changed(self) -> None:
        """Call after a commit that changed role assignments or group membership (w.later)."""
        self.access_version += 1

    @contextlib.contextmanager
    def unit_of_work(
        self, lock: contextlib.AbstractContextManager[object] | None = None, *, purpose: str | None = None
    ) -> Iterator[Work]:
        """A lost database connection ends the unit with DatabaseUnavailable (the store says
        whether its commit is in doubt) and runs none of its effects; callers that can run the
        whole call again do so through outage.ride_out, outside the lock. `lock`: a narrower lock
        than the process-wide one, for the few units proven safe beside it. `purpose`: what the
        lock's hold is counted under (telemetry.master_lock_held_by), a constant string (it is a
        metric's label); by default the module whose code runs the `with`, which a shared helper
        (a batch of units) names better itself."""
        # Only the outermost unit on a thread is timed: one inside another neither waits nor
        # holds the lock beyond the outer one's hold.
        timed = lock is None and not getattr(_units_held, "depth", 0)
        if timed and purpose is None:
            # This generator's frame, contextlib's __enter__, then the caller's. (A wrapper around
            # unit_of_work, as a bench's timer, is counted under its own module.)
            purpose = _module_purpose(sys._getframe(2).f_globals.get("__name__", ""))
        asked = time.perf_counter()
        with lock if lock is not None else self.lock:
            taken = time.perf_counter()
            taken_cpu = time.thread_time() if timed else 0.0
            _units_held.depth = getattr(_units_held, "depth", 0) + 1
            try:
                work: Work | None = None
                try:
                    with self.db.transaction() as session:
                        work = Work(session)
                        yield work
                        work.settle()
                finally:
                    for end in work.at_end if work is not None else ():
                        end()
                self.data_changed()
                # Committed: now it is safe to tell the world.
                for effect in work.after_commit:
                    try:
                        effect()
                    except Exception:
                        log.exception("post-commit effect failed")
            finally:
                _units_held.depth -= 1
                if timed:
                    self.telemetry.master_lock_wait.observe(taken - asked)
                    held = time.perf_counter() - taken
                    self.telemetry.master_lock_held.observe(held)
                    self.telemetry.master_lock_held_by.add(
                        purpose or "", held, time.thread_time() - taken_cpu
                    )
