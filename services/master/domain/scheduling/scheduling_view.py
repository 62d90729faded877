"""The master's side of a scheduling session: what the scheduler was last told, kept in memory and
brought up to date from the rows that changed, so that a pass reads and sends what changed
instead of the whole queue.

Which rows changed is learned from the database sessions themselves (`ChangeTracker`): every flush
of a unit of work lists the allocations, agents, slots and experiments it wrote in a way a pass
reads (a container's PULLING and STARTING write their allocation's row and change nothing the
scheduler is told; an allocation that ended is only dropped, unread), and the list is handed over
once the unit commits (a rolled-back unit changed nothing). What a pass places it tells the view
itself once the placement committed (`placed`): a burst's pass places thousands, and reading each
back at the next pass cost that pass as much again. A bulk statement on those
tables, which names no rows, asks for a whole new snapshot, as does any doubt: a failed call, a
scheduler that lost the session, a master that just started. A snapshot also runs every
SNAPSHOT_EVERY_S, so even a change no flush reported is seen within minutes.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import bindparam, inspect, select
from sqlalchemy.orm import ORMExecuteState, Session
from sqlalchemy.orm.base import PASSIVE_NO_INITIALIZE

from cairn.scheduler.v1 import scheduler_pb2 as pb
from services.master.domain.allocations.placement import PortOffsets
from services.master.domain.allocations.rendezvous import PORT_BLOCKS
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.states import LIVE_ALLOCATION, PLACED_ALLOCATION
from services.master.domain.kernel.states import AllocationState as A
from services.master.domain.scheduling import fair_share_inputs
from services.master.domain.scheduling.scheduling_rows import (
    JobLimits,
    agent_messages,
    allocation_rows,
    allocation_rows_by_id,
    limits_of,
    live_allocation_rows_of,
    offered,
    over_max_slots,
    placed_row,
    pool_messages,
    pools_read_started_at,
    request_message,
)
from services.master.store import models
from services.master.store.db import Database
from services.master.store.json_rows import INSERTED_IDS

CHECK_ENV = "CAIRN_CHECK_SCHEDULING_VIEW"
# A snapshot even when nothing asked for one: a safety net, not a mechanism.
SNAPSHOT_EVERY_S = 300.0
_WATCHED = {
    models.Allocation.__tablename__,
    models.Agent.__tablename__,
    models.AgentSlot.__tablename__,
    models.Experiment.__tablename__,
    models.Task.__tablename__,
}

# In a unit of work's session: the allocations the scheduling pass places in it (placement.assign),
# whose change the pass's view takes from the pass itself (SchedulingView.placed), not from a read.
PLACED_BY_PASS = "cairn.placed_by_scheduling_pass"

# INSERT statements whose new rows a pass learns of one by one, as from a flush: new allocations by
# their ids (allocations.request_many inserts them so); new tasks not at all (a flush of a new Task
# records nothing either: a pass reads a task through its allocations, which come after it).
_INSERTS_KNOWN_BY_ROW = {models.Allocation.__tablename__, models.Task.__tablename__}


def _inserted_ids(state: ORMExecuteState) -> list[Any] | None:
    """The `id` of every row an INSERT statement's parameters give (a dict, or a list of them for
    many rows); None when they give none or not all give one (an INSERT ... SELECT, values in the
    statement itself), and the caller records the statement as changing everything. Rows sent as
    one JSON document (store/json_rows.py) give their ids in an execution option instead."""
    given = state.execution_options.get(INSERTED_IDS)
    if given is not None:
        return list(given)
    parameters: Any = state.parameters
    rows: list[Any] = [parameters] if isinstance(parameters, dict) else list(parameters or [])
    ids = [row.get("id") if isinstance(row, dict) else None for row in rows]
    if not ids or None in ids:
        return None
    return ids


@dataclass
class Changed:
    allocations: set[str] = field(default_factory=set)
    # Of those, the ones that ended (TERMINATED is final): a pass drops them without reading them.
    ended: set[str] = field(default_factory=set)
    # Allocations of which only the start of a placed one's run changed (RUNNING): only a pool that
    # reads when work started (fair share, quotas) needs them (SchedulingView.reads_started_at).
    started: set[str] = field(default_factory=set)
    agents: set[str] = field(default_factory=set)
    experiments: set[int] = field(default_factory=set)
    # Of those, the ones created since the last take: every allocation they have was created since
    # too, so it is among `allocations` already, and none needs reading by its experiment.
    new_experiments: set[int] = field(default_factory=set)
    # A weight or quota changed: send the pools again.
    pools: bool = False
    # Something changed that names no rows: read everything again.
    everything: bool = False

    def __bool__(self) -> bool:
        return bool(
            self.allocations
            or self.started
            or self.agents
            or self.experiments
            or self.pools
            or self.everything
        )


class ChangeTracker:
    """The rows a scheduling pass reads that committed units of work changed since `take`."""

    _KEY = "cairn.scheduling_changes"

    def __init__(self, db: Database) -> None:
        self._lock = threading.Lock()
        self._committed = Changed(everything=True)
        self._stopped = False
        self._db = db
        for name, listener in self._listeners():
            db.listen_to_writes(name, listener)

    def _listeners(self) -> list[tuple[str, Any]]:
        return [
            ("after_flush", self._flushed),
            ("do_orm_execute", self._statement),
            ("after_commit", self._commit),
            ("after_rollback", self._rollback),
        ]

    def take(self) -> Changed:
        with self._lock:
            taken, self._committed = self._committed, Changed()
        return taken

    def quiet(self) -> bool:
        """Whether no committed change waits for the next pass."""
        with self._lock:
            return not self._committed

    def stop(self) -> None:
        """Record nothing more (the view is no longer used, or the master stops): the database's
        sessions no longer call this tracker. Idempotent."""
        self._stopped = True  # a unit already past its flush may still call in once
        for name, listener in self._listeners():
            self._db.stop_listening_to_writes(name, listener)

    def everything(self) -> None:
        with self._lock:
            self._committed.everything = True

    @classmethod
    def _pending(cls, session: Session) -> Changed:
        changed = session.info.get(cls._KEY)
        if changed is None:
            changed = session.info[cls._KEY] = Changed()
        return changed

    def _flushed(self, session: Session, _context: Any) -> None:
        changed = self._pending(session)
        placed_by_pass = session.info.get(PLACED_BY_PASS, ())
        for obj in (*session.new, *session.dirty, *session.deleted):
            if isinstance(obj, models.Allocation):
                change = _allocation_change(obj, session)
                if change == "changed" and obj.id in placed_by_pass:
                    continue  # the pass tells its view itself (SchedulingView.placed)
                if change == "started":
                    changed.started.add(obj.id)
                elif change is not None:
                    changed.allocations.add(obj.id)
                if change == "ended":
                    changed.ended.add(obj.id)
            elif isinstance(obj, models.Agent):
                changed.agents.add(obj.id)
            elif isinstance(obj, models.AgentSlot):
                changed.agents.add(obj.agent_id)
            elif isinstance(obj, models.Experiment) and obj.id is not None and _bears_on_passes(obj):
                changed.experiments.add(obj.id)
                if obj in session.new:  # after_flush still sees the flush's new objects as new
                    changed.new_experiments.add(obj.id)
            elif isinstance(obj, models.PoolShare):
                changed.pools = True

    def _statement(self, state: ORMExecuteState) -> None:
        if not (state.is_update or state.is_delete or state.is_insert):
            return
        name = getattr(getattr(state.statement, "table", None), "name", None)
        if state.is_insert and name in _INSERTS_KNOWN_BY_ROW:
            ids = _inserted_ids(state)
            if ids is not None:
                # As a flush of the same new rows would have recorded them (_flushed).
                if name == models.Allocation.__tablename__:
                    self._pending(state.session).allocations.update(ids)
                return
        if name in _WATCHED:
            self._pending(state.session).everything = True
        elif name == models.PoolShare.__tablename__ or (
            # A workspace's deletion takes its pool shares with it (ON DELETE CASCADE), in the
            # database, where no statement of the unit names them.
            state.is_delete and name == models.Workspace.__tablename__
        ):
            self._pending(state.session).pools = True

    def _commit(self, session: Session) -> None:
        changed = session.info.pop(self._KEY, None)
        if not changed or self._stopped:
            return
        with self._lock:
            self._committed.allocations |= changed.allocations
            self._committed.ended |= changed.ended
            self._committed.started |= changed.started
            self._committed.agents |= changed.agents
            self._committed.experiments |= changed.experiments
            self._committed.new_experiments |= changed.new_experiments
            self._committed.pools |= changed.pools
            self._committed.everything |= changed.everything

    def _rollback(self, session: Session) -> None:
        session.info.pop(self._KEY, None)


# What of an experiment a pass reads (its state: a stopping experiment's pending work is not
# offered; its config: max_slots; its start: the job's place in the queue). Every trial's end or
# progress also writes the experiment row; those writes must not cost a pass a re-read of all its
# allocations.
_EXPERIMENT_FIELDS = ("state", "config", "start_time")


def _bears_on_passes(experiment: models.Experiment) -> bool:
    attrs = inspect(experiment).attrs
    return any(attrs[name].history.has_changes() for name in _EXPERIMENT_FIELDS)


# What of an allocation a pass reads (scheduling_rows._ALLOCATION_ROWS, and its placements), but
# its state: of that a pass reads only whether it waits, holds slots or has ended
# (`_state_class`). A container's PULLING and STARTING, an exit's reason, a preemption's flags
# write the row too; none of them changes what the scheduler is told.
_ALLOCATION_FIELDS = frozenset(
    {
        "task_id",
        "trial_id",
        "slots",
        "resource_pool",
        "priority",
        "requested_at",
        "start_time",
        "port_offset",
        "releasing",
        "placements",
    }
)
_ALLOCATION_WATCHED = _ALLOCATION_FIELDS | {"state"}
# A placed allocation's start alone: read only where a pool reads it (SchedulingView.reads_started_at).
_STARTED_ONLY = frozenset({"start_time"})


def _state_class(state: str) -> str:
    if state == A.PENDING:
        return "waits"
    return "holds slots" if state in PLACED_ALLOCATION else "ended"


def _allocation_change(allocation: models.Allocation, session: Session) -> str | None:
    """What a flush of `allocation` changes of what a pass tells the scheduler: "ended" (its state
    became TERMINATED, which is final), "started" (of what a pass reads, only its start_time: a
    placed allocation began to run), "changed" (a new or deleted row, another field a pass reads,
    its state moved from one class to another; a state whose earlier value is not known counts as
    moved), or None. Read from what the session recorded as set (a field set to the value it had
    counts as changed) and the state's history: nothing is loaded. Every flush of every agent's
    report runs this: one history, not one a field (a history each cost the agents' batches a
    sixth of their time at 1,000 agents)."""
    if allocation in session.new or allocation in session.deleted:
        return "changed"
    instance = inspect(allocation)
    modified = _ALLOCATION_WATCHED - instance.unmodified_intersection(_ALLOCATION_WATCHED)
    if not modified:
        return None
    if "state" in modified:
        # As `instance.attrs["state"].history`, without making the state's namespace of every
        # attribute (a dict of 35 on the first look at each allocation of each unit).
        state = instance.get_history("state", PASSIVE_NO_INITIALIZE)
        if not state.added:
            return "changed"
        if state.added[0] == A.TERMINATED:
            return "ended"
        if not state.deleted or _state_class(state.deleted[0]) != _state_class(state.added[0]):
            return "changed"
        modified = modified - {"state"}
        if not modified:
            return None
    return "started" if modified == _STARTED_ONLY else "changed"


@dataclass
class Pass:
    """One pass's call to the scheduler, and what the master needs beside the answer."""

    request: pb.ScheduleChangesRequest
    # Pending allocations held back by their experiment's max_slots, with why.
    capped: dict[str, str]
    any_pending: bool


# The placements of placed allocations, read by id (built once: a statement built anew costs more
# than its run at a small cluster).
_PLACEMENTS = select(models.Allocation.id, models.Allocation.placements).where(
    models.Allocation.id.in_(bindparam("ids", expanding=True))
)


class SchedulingView:
    def __init__(self, ctx: MasterContext, track: bool = True) -> None:
        self._ctx = ctx
        self.tracker = ChangeTracker(ctx.db) if track else None
        # Held while a pass changes the view, and by readers of its state from other threads.
        self.lock = threading.Lock()
        # Compare every pass with a whole read (tests set it): a change the tracker missed shows
        # as a difference, and fails loudly instead of scheduling from a stale view.
        self.check = os.environ.get(CHECK_ENV) == "1"
        self._session_id = ""
        self._version = 0
        self._snapshot_at = 0.0
        # What the scheduler holds, as sent.
        self._requests: dict[str, pb.AllocationRequest] = {}
        self._agents: dict[str, pb.Agent] = {}
        self._placeable: frozenset[str] = frozenset()
        # Every live allocation's row, and which experiment each belongs to.
        self._rows: dict[str, Any] = {}
        self._of_experiment: dict[int, set[str]] = {}
        self._limits: dict[int, JobLimits] = {}
        self._capped: dict[int, dict[str, str]] = {}  # experiment -> allocation -> why
        self._submitted: dict[datetime, Timestamp] = {}
        self._pending = 0
        # The pools as last sent; a fair-share pool's groups change with usage and quotas, any
        # pool's with quotas.
        self._fair_share = any(p.scheduler_type == "fair_share" for p in ctx.settings.pools)
        # Whether a pool with guarantees was last sent (its minimum run before reclaim moves).
        self._reclaiming = False
        self._pools_sent: list[pb.ResourcePool] = []
        # Whether a pool sent reads when placed work began to run (pools_read_started_at): if not,
        # a start (RUNNING) is not sent, nor read.
        self.reads_started_at = False
        self._groups_at = 0.0
        # The users (fair_share_inputs.user_key) the groups last sent name.
        self._grouped: set[str] = set()
        # How many live allocations hold each port block (allocations.PortOffsets).
        self._port_counts = [0] * PORT_BLOCKS
        # What the passes placed since the last pass, as the scheduler is to be told of it
        # (`placed`), and the allocations to read at the next pass that `placed` could not take.
        self._due: dict[str, pb.AllocationRequest] = {}
        self._reread: set[str] = set()

    @property
    def pending(self) -> int:
        """How many requests the scheduler holds that wait for a place."""
        return self._pending

    @property
    def session(self) -> tuple[str, int]:
        """The scheduler's session this view speaks to, and its version now ("" before a snapshot)."""
        return self._session_id, self._version

    def pending_requests(self) -> dict[str, pb.AllocationRequest]:
        """What the scheduler holds now; read under `lock` (passes change it)."""
        return self._requests

    def resync(self) -> None:
        """Send a snapshot next: the scheduler's session is gone or in doubt."""
        self._session_id = ""

    def next_pass(self) -> Pass:
        if not self.check:
            return self._next_pass()
        # Checked (tests): no transaction may commit between reading the changes and the whole
        # read they are compared with, or the comparison would see a change the pass rightly
        # leaves to the next one. Units of work hold this lock through their commit.
        with self._ctx.lock:
            return self._next_pass()

    def _next_pass(self) -> Pass:
        assert self.tracker is not None, "a view without a tracker only takes snapshots"
        changed = self.tracker.take()
        placeable = self._ctx.hub.placeable_ids()
        snapshot = (
            not self._session_id
            or changed.everything
            or time.monotonic() - self._snapshot_at > SNAPSHOT_EVERY_S
        )
        if snapshot:
            return self._snapshot(placeable)
        request = pb.ScheduleChangesRequest(
            session_id=self._session_id,
            base_version=self._version,
            version=self._version + 1,
            keep_assignments=True,
        )
        with self._ctx.db.read() as s:
            self._refresh_allocations(s, changed, request)
            agent_ids = changed.agents | (placeable ^ self._placeable)
            if agent_ids:
                self._refresh_agents(s, agent_ids, placeable, request)
            # Fair share's groups change with usage, and a reclaiming pool's minimum run moves with
            # the clock: both are sent again every REFRESH_S; a quota's change at once, in any pool.
            due = time.monotonic() - self._groups_at >= fair_share_inputs.REFRESH_S
            due = due and (self._fair_share or self._reclaiming)
            newcomers = self._fair_share and any(
                r.user not in self._grouped for r in request.requests if r.slots_needed > 0
            )
            if changed.pools or due or newcomers:
                pools = self._pools(s)
                if pools_read_started_at(pools) != self.reads_started_at:
                    # Every placed request's started_at means something else now: start again.
                    self._session_id = ""
                elif pools != self._pools_sent:
                    request.pools.extend(pools)
                    self._pools_sent = pools
        if not self._session_id:
            return self._snapshot(placeable)
        self._placeable = placeable
        self._version += 1
        if self.check:
            self._check_against_database(placeable)
        return Pass(request, self._all_capped(), self.pending > 0)

    def verify(self) -> bool:
        """Compare the view with a whole read now, as `check` does after every pass (tests that
        drive passes themselves check once they have settled, which costs one whole read instead
        of one a pass); AssertionError if the tracker missed a change. Nothing to compare while a
        committed change still waits for the next pass, or before the first snapshot: False."""
        with self._ctx.lock, self.lock:
            if not self._session_id or self.tracker is None or not self.tracker.quiet():
                return False
            if self._due or self._reread:
                return False
            self._check_against_database(self._placeable)
            return True

    def _check_against_database(self, placeable: frozenset[str]) -> None:
        fresh = SchedulingView(self._ctx, track=False)
        fresh._snapshot(placeable)
        missed = {
            "requests": sorted(
                k
                for k in fresh._requests.keys() | self._requests.keys()
                if fresh._requests.get(k) != self._requests.get(k)
            ),
            "agents": sorted(
                k
                for k in fresh._agents.keys() | self._agents.keys()
                if fresh._agents.get(k) != self._agents.get(k)
            ),
        }
        if fresh._port_counts != self._port_counts:
            missed["port offsets"] = ["counts differ"]
        if missed["requests"] or missed["agents"] or "port offsets" in missed:
            raise AssertionError(f"the scheduling view missed changes: {missed}")

    def _snapshot(self, placeable: frozenset[str]) -> Pass:
        self._session_id = uuid.uuid4().hex
        self._version = 1
        self._snapshot_at = time.monotonic()
        self._rows, self._of_experiment, self._requests, self._capped = {}, {}, {}, {}
        self._port_counts = [0] * PORT_BLOCKS
        self._submitted = {}
        self._due, self._reread = {}, set()
        with self._ctx.db.read() as s:
            rows = allocation_rows(s)
            self._limits = limits_of(s, {r.experiment_id for r in rows if r.experiment_id is not None})
            for row in rows:
                self._keep(row)
            placements = self._placements(s, [r.id for r in rows if r.state in PLACED_ALLOCATION])
            for experiment_id in list(self._of_experiment):
                self._cap(experiment_id)
            self._pools_sent = self._pools(s)
            self.reads_started_at = pools_read_started_at(self._pools_sent)
            for row in rows:
                message = self._message(row, placements)
                if message is not None:
                    self._requests[row.id] = message
            agents = agent_messages(s, placeable, None)
        self._pending = sum(1 for r in self._requests.values() if not r.placements)
        self._agents = {a.id: a for a in agents}
        self._placeable = placeable
        request = pb.ScheduleChangesRequest(
            session_id=self._session_id,
            version=self._version,
            snapshot=True,
            keep_assignments=True,
            pools=self._pools_sent,
            agents=agents,
            requests=list(self._requests.values()),
        )
        return Pass(request, self._all_capped(), self.pending > 0)

    # -- allocations ---------------------------------------------------------------------------

    def kept(self, assignments: Iterable[pb.Assignment]) -> None:
        """The scheduler took an answer's `assignments` as placed (ScheduleChangesRequest's
        keep_assignments): hold them as it now does, running where assigned with started_at their
        requested_at, so that a pass's placements need not be sent back (`placed` sends only what
        differs, `not_applied` what the master did not apply). Under `lock`."""
        for assignment in assignments:
            sent = self._requests.get(assignment.allocation_id)
            if sent is None or sent.placements:
                # The scheduler placed what the view does not hold as waiting: the two disagree.
                self.resync()
                return
            held = pb.AllocationRequest()
            held.CopyFrom(sent)
            held.started_at.CopyFrom(sent.requested_at)
            held.placements.extend(assignment.placements)
            self._requests[assignment.allocation_id] = held
            self._pending -= 1

    def placed(
        self, placements: list[tuple[str, int | None, list[dict[str, Any]]]], not_applied: Iterable[str] = ()
    ) -> None:
        """What a pass placed, once its unit of work committed: (allocation id, port block,
        placements) each, and the assignments of its chunk it did not apply (the cluster moved on
        while the scheduler decided). The view keeps the placed rows as they now read without
        reading them back (the tracker leaves them out: PLACED_BY_PASS), and tells the scheduler at
        the next pass what it does not already hold of them (nothing, where it kept its
        assignments). An allocation of an experiment under a max_slots, whose others' messages may
        change with it, one the view does not hold as pending, and one not applied are read at the
        next pass instead: what the scheduler holds of them is then corrected. Under `lock`."""
        self._reread.update(not_applied)
        for allocation_id, port_offset, where in placements:
            old = self._rows.get(allocation_id)
            if old is None or old.state != A.PENDING or allocation_id not in self._requests:
                self._reread.add(allocation_id)
                continue
            if old.experiment_id is not None and self._cap_of(old.experiment_id) is not None:
                self._reread.add(allocation_id)
                continue
            self._forget(allocation_id)
            self._keep(placed_row(old, port_offset))
            message = self._message(self._rows[allocation_id], {allocation_id: where})
            if message is None:
                self._reread.add(allocation_id)  # no longer offered: its removal is sent
            elif message != self._requests[allocation_id]:
                self._due[allocation_id] = message

    def _refresh_allocations(self, s: Session, changed: Changed, request: pb.ScheduleChangesRequest) -> None:
        ids = set(changed.allocations) | self._reread
        if self.reads_started_at:
            ids |= changed.started
        self._reread = set()
        # What passes placed: sent as they kept it, unless changed since (then read below).
        due, self._due = self._due, {}
        for request_id, placed_message in due.items():
            if request_id in ids:
                continue
            before = self._requests.get(request_id)
            self._requests[request_id] = placed_message
            self._pending -= before is not None and not before.placements
            request.requests.append(placed_message)
        experiments = set(changed.experiments)
        if experiments:
            # An experiment's state or max_slots bears on all its allocations.
            self._limits.update(limits_of(s, experiments))
            for experiment_id in experiments:
                ids |= self._of_experiment.get(experiment_id, set())
            # A new experiment's allocations are all new rows, read below with the others.
            known = experiments - changed.new_experiments
            if known:
                ids |= {row.id for row in live_allocation_rows_of(s, known)}
        if not ids:
            return
        # An ended allocation is only dropped: there is nothing of it to read.
        to_read = ids - changed.ended
        rows = {row.id: row for row in allocation_rows_by_id(s, to_read)} if to_read else {}
        new_experiments = {
            r.experiment_id
            for r in rows.values()
            if r.experiment_id is not None and r.experiment_id not in self._limits
        }
        if new_experiments:
            self._limits.update(limits_of(s, new_experiments))
        touched: set[int] = set(experiments)
        for request_id in ids:
            old = self._forget(request_id)
            if old is not None and old.experiment_id is not None:
                touched.add(old.experiment_id)
            row = rows.get(request_id)
            if row is not None and row.state in LIVE_ALLOCATION:
                self._keep(row)
                if row.experiment_id is not None:
                    touched.add(row.experiment_id)
        # Whether an allocation is held back depends on its experiment's others (under a cap).
        for experiment_id in touched:
            self._cap(experiment_id)
            if self._cap_of(experiment_id) is not None:
                ids |= self._of_experiment.get(experiment_id, set())
        placements = self._placements(
            s, [i for i in ids if i in self._rows and self._rows[i].state in PLACED_ALLOCATION]
        )
        for request_id in sorted(ids):
            row = self._rows.get(request_id)
            message = self._message(row, placements) if row is not None else None
            sent = self._requests.get(request_id)
            if message is None:
                if sent is not None:
                    del self._requests[request_id]
                    self._pending -= not sent.placements
                    request.removed_requests.append(request_id)
            elif message != sent:
                self._requests[request_id] = message
                self._pending += (not message.placements) - (sent is not None and not sent.placements)
                request.requests.append(message)

    def _pools(self, s: Session) -> list[pb.ResourcePool]:
        """The pools as the scheduler takes them now, with their groups' quotas (and in a fair-share
        pool weights and recent usage, read at most every fair_share_inputs.REFRESH_S)."""
        self._groups_at = time.monotonic()
        groups = fair_share_inputs.share_groups(s, self._ctx.settings.pools, utcnow())
        self._grouped = {u.key for _, users in groups.values() for u in users}
        self._reclaiming = bool(fair_share_inputs.guarantees_set(groups))
        return pool_messages(self._ctx, groups, utcnow())

    def port_offsets(self) -> PortOffsets:
        """The live allocations' port blocks as of this pass, for the assignments it makes."""
        return PortOffsets.of_counts(self._port_counts)

    def _forget(self, request_id: str) -> Any:
        """Undo `_keep` for the row kept of `request_id`; that row, or None."""
        old = self._rows.pop(request_id, None)
        if old is not None and old.port_offset is not None:
            self._port_counts[old.port_offset % PORT_BLOCKS] -= 1
        if old is not None and old.experiment_id is not None:
            self._of_experiment.get(old.experiment_id, set()).discard(request_id)
        return old

    def _keep(self, row: Any) -> None:
        self._rows[row.id] = row
        if row.port_offset is not None:
            self._port_counts[row.port_offset % PORT_BLOCKS] += 1
        if row.experiment_id is not None:
            self._of_experiment.setdefault(row.experiment_id, set()).add(row.id)

    def _cap(self, experiment_id: int) -> None:
        members = self._of_experiment.get(experiment_id, set())
        if not members:
            self._of_experiment.pop(experiment_id, None)
            self._capped.pop(experiment_id, None)
            return
        cap = self._cap_of(experiment_id)
        if cap is None:
            self._capped.pop(experiment_id, None)
            return
        rows = [self._rows[i] for i in members]
        self._capped[experiment_id] = over_max_slots([(r, experiment_id, cap) for r in rows if offered(r)])

    def _cap_of(self, experiment_id: int) -> int | None:
        limits = self._limits.get(experiment_id)
        return limits.max_slots if limits is not None else None

    def _all_capped(self) -> dict[str, str]:
        return {k: v for capped in self._capped.values() for k, v in capped.items()}

    def _message(self, row: Any, placements: dict[str, list[dict[str, Any]]]) -> pb.AllocationRequest | None:
        if not offered(row):
            return None
        if row.experiment_id is not None and row.id in self._capped.get(row.experiment_id, {}):
            return None
        limits = self._limits.get(row.experiment_id) if row.experiment_id is not None else None
        weight = limits.weight if limits else 1.0
        return request_message(row, placements.get(row.id), self._submitted, weight, self.reads_started_at)

    @staticmethod
    def _placements(s: Session, ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        if not ids:
            return {}
        return {row.id: row.placements for row in s.execute(_PLACEMENTS, {"ids": ids})}

    # -- agents --------------------------------------------------------------------------------

    def _refresh_agents(
        self, s: Session, agent_ids: set[str], placeable: frozenset[str], request: pb.ScheduleChangesRequest
    ) -> None:
        found = {a.id: a for a in agent_messages(s, placeable, None, agent_ids)}
        for agent_id in sorted(agent_ids):
            message = found.get(agent_id)
            sent = self._agents.get(agent_id)
            if message is None:
                if sent is not None:
                    del self._agents[agent_id]
                    request.removed_agents.append(agent_id)
            elif message != sent:
                self._agents[agent_id] = message
                request.agents.append(message)
