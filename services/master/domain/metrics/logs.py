"""Task logs (a trial's among them): storing what agents ship (each line once, whatever is
resent) and reading it back."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Select, Table, bindparam, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from cairn.agent.v1 import agent_pb2 as apb
from services.common.logging import get_logger
from services.master.domain.kernel.context import MasterContext, StripedLocks
from services.master.domain.kernel.group_commit import GroupCommit, Lane
from services.master.domain.kernel.topics import task_logs_topic, trial_logs_topic
from services.master.domain.metrics.container_owners import ContainerOwner, ContainerOwners
from services.master.domain.trials import log_policies
from services.master.domain.webhooks.triggers import LogLine, TaskLogMatcher
from services.master.store import models
from services.master.store.text_search import substring_position

log = get_logger(__name__)

# Agents' batches in one transaction at most: a batch holds up to a few thousand lines.
MAX_BATCHES = 32

LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


# A container's acknowledged seq raised to what a group commit stored of it (an executemany).
_CONTAINERS = cast(Table, models.Container.__table__)
_RAISE_ACKED_SEQ = (
    update(_CONTAINERS)
    .where(_CONTAINERS.c.id == bindparam("container"), _CONTAINERS.c.acked_seq < bindparam("seq"))
    .values(acked_seq=bindparam("seq"))
)


class LogStore:
    def __init__(self, ctx: MasterContext) -> None:
        self._ctx = ctx
        self._owners = ContainerOwners(ctx)
        # A follower reads a key's lines (a trial's, or a task's) by id (`id > last seen`), so
        # they must become visible in id order. PostgreSQL takes a line's id at its INSERT, not at
        # the COMMIT: two stores of one trial's lines at once (the streams' log writer and a caller
        # of `store`) could commit the later ids first, the follower would read past the
        # earlier ones, and they would never be followed (read back whole, they are there). So on
        # PostgreSQL the stores of one key commit one at a time; SQLite's one writer does that.
        self._key_locks = StripedLocks() if ctx.db.dialect == "postgresql" else None
        # Webhooks' TASK_LOG triggers: a match owes its post in the lines' own transaction.
        self._webhook_patterns = TaskLogMatcher()
        # Experiments' log policies: a trial's match is recorded in the lines' own transaction.
        self._log_policies = log_policies.ExperimentPolicies()
        # Agents' batches shipped at the same moment, stored together (store()).
        self._commits: GroupCommit[_Received, dict[str, int]] = GroupCommit(self._write, MAX_BATCHES)

    def store(self, agent_id: str, batch: apb.LogBatch) -> dict[str, int]:
        """Store a batch; returns the highest stored seq per container (to acknowledge). Batches
        that agents' streams ship at the same moment are stored in one transaction (a group
        commit: kernel/group_commit.py), each still acknowledged only once stored."""
        return self._commits.run(_Received(agent_id, batch))

    def submit_async(
        self, agent_id: str, batch: apb.LogBatch, executor: Executor, lane: Lane
    ) -> asyncio.Future[dict[str, int]]:
        """`store` queued from a coroutine on the running loop, in `lane` (group_commit.py): the
        future of what to acknowledge. An agent's stream queues its batches this way, several at
        once, beside its reports (servicers/agent_reports.py); `executor` writes the batches."""
        return self._commits.submit_async(_Received(agent_id, batch), executor, lane)

    def _rows(self, agent_id: str, batch: apb.LogBatch, owners: dict[str, ContainerOwner]) -> _Shipped:
        shipped = _Shipped(agent_id)
        unknown: set[str] = set()
        foreign: set[str] = set()
        for entry in batch.entries:
            owner = owners.get(entry.container_id)
            if owner is None:
                unknown.add(entry.container_id)
                continue
            if owner.agent_id != agent_id:
                # An agent speaks for its own containers only, as with system samples: lines sent
                # for another agent's would be stored as that trial's, match its log policies and
                # fire its webhooks. Neither stored nor acknowledged.
                foreign.add(entry.container_id)
                continue
            shipped.owners.add(owner)
            # Text columns cannot hold NUL on PostgreSQL; a program may well print one.
            message = entry.message.replace("\x00", "\ufffd")
            if owner.trial_id is not None and owner.experiment_id is not None:
                shipped.policy_lines.append(
                    log_policies.Line(
                        owner.trial_id, (owner.experiment_id, owner.config_version), agent_id, message
                    )
                )
            shipped.highest[entry.container_id] = max(shipped.highest.get(entry.container_id, 0), entry.seq)
            timestamp = _timestamp(entry)
            shipped.rows.append(
                {
                    "task_id": owner.task_id,
                    "trial_id": owner.trial_id,
                    "allocation_id": owner.allocation_id,
                    "container_id": entry.container_id,
                    "seq": entry.seq,
                    "agent_id": agent_id,
                    "rank": entry.rank if entry.HasField("rank") else None,
                    "stdtype": entry.stdtype or "stdout",
                    "level": entry.level.upper() if entry.level.upper() in LEVELS else "",
                    "source": entry.source or "task",
                    "timestamp": timestamp,
                    "message": message,
                }
            )
        if unknown:
            log.warning(
                "log lines for unknown containers dropped", agent_id=agent_id, containers=sorted(unknown)[:5]
            )
        if foreign:
            log.warning(
                "log lines for containers not on the sending agent dropped",
                agent_id=agent_id,
                containers=sorted(foreign)[:5],
            )
        return shipped

    def _write(self, received: Sequence[_Received]) -> list[dict[str, int]]:
        """One transaction for the batches of one group commit: their lines, the webhook and log
        policy matches they owe, and each container's acknowledged seq. Whose each line's
        container is, is read once for the batches together (most are remembered)."""
        owners_of = self._owners.of(entry.container_id for r in received for entry in r.batch.entries)
        batches = [self._rows(r.agent_id, r.batch, owners_of) for r in received]
        rows = [row for shipped in batches for row in shipped.rows]
        if not rows:
            return [shipped.highest for shipped in batches]
        owners = {owner for shipped in batches for owner in shipped.owners}
        highest: dict[str, int] = {}
        for shipped in batches:
            for container_id, seq in shipped.highest.items():
                highest[container_id] = max(highest.get(container_id, 0), seq)
        with contextlib.ExitStack() as in_order:
            if self._key_locks is not None:
                locks = {self._key_locks.of(_topic(o.trial_id, o.task_id)) for o in owners}
                # Always taken in one order, so that two batches holding some never deadlock.
                for lock in sorted(locks, key=id):
                    in_order.enter_context(lock)
            with self._ctx.db.transaction() as s:
                insert = pg_insert if self._ctx.db.dialect == "postgresql" else sqlite_insert
                s.execute(insert(models.TaskLog).on_conflict_do_nothing(), rows)
                owed_posts = self._webhook_patterns.scan(self._ctx, s, _lines(rows))
                log_policies.record_matches(
                    s, self._log_policies, [line for shipped in batches for line in shipped.policy_lines]
                )
                # The batches' containers in one statement, not one each; never lowered (an
                # agent's batches of one container come in order, yet a resend may come late).
                s.connection().execute(
                    # In one order (by id), as the reports' flushes take their rows' locks.
                    _RAISE_ACKED_SEQ,
                    [{"container": c, "seq": seq} for c, seq in sorted(highest.items())],
                )
        for owner in owners:
            self._ctx.topics.publish(_topic(owner.trial_id, owner.task_id))
        if owed_posts:
            self._ctx.webhook_wakeup.set()
        return [shipped.highest for shipped in batches]


def _timestamp(entry: apb.LogEntry) -> datetime:
    """When the line was written, as the agent says; now, where it says nothing or nothing a
    datetime can hold (one line's bad timestamp must not fail the batches stored with it)."""
    if entry.HasField("timestamp"):
        with contextlib.suppress(ValueError, OverflowError):
            return entry.timestamp.ToDatetime(UTC)
    return datetime.now(UTC)


@dataclass(frozen=True)
class _Received:
    """One agent's batch of lines as its stream read it, waiting for its group commit."""

    agent_id: str
    batch: apb.LogBatch


@dataclass
class _Shipped:
    """One agent's batch of lines, made rows (those of its own known containers)."""

    agent_id: str
    rows: list[dict[str, object]] = field(default_factory=list)
    highest: dict[str, int] = field(default_factory=dict)
    owners: set[ContainerOwner] = field(default_factory=set)
    # Its trials' lines, to be matched against their experiments' log policies.
    policy_lines: list[log_policies.Line] = field(default_factory=list)


def _lines(rows: list[dict[str, object]]) -> list[LogLine]:
    return [
        LogLine(
            task_id=str(row["task_id"]),
            trial_id=row["trial_id"] if isinstance(row["trial_id"], int) else None,
            agent_id=str(row["agent_id"]),
            message=str(row["message"]),
        )
        for row in rows
    ]


@dataclass(frozen=True)
class ShippedLine:
    """A line an unmanaged trial's code shipped of its own output (the stock client's log shipper)."""

    rank: int | None
    timestamp: datetime
    message: str


# Bounds on one shipped batch (the stock shipper sends at most 1000 lines at once).
MAX_SHIPPED_LINES = 5000
MAX_SHIPPED_LINE_CHARS = 64 * 1024


def store_shipped(ctx: MasterContext, task_id: str, trial_id: int, lines: list[ShippedLine]) -> int:
    """Store a shipped batch under the trial's task. Lines come from no container: each batch is its
    own source ("shipped-<uuid>"), numbered in order, so every line is stored once."""
    if not lines:
        return 0
    source_id = f"shipped-{uuid.uuid4().hex}"
    rows = [
        {
            "task_id": task_id,
            "trial_id": trial_id,
            "allocation_id": "",
            "container_id": source_id,
            "seq": seq,
            "agent_id": "",
            "rank": line.rank,
            "stdtype": "stdout",
            "level": "",
            "source": "task",
            "timestamp": line.timestamp,
            "message": line.message.replace("\x00", "\ufffd"),
        }
        for seq, line in enumerate(lines, start=1)
    ]
    with ctx.db.transaction() as s:
        s.execute(insert(models.TaskLog), rows)
    ctx.topics.publish(_topic(trial_id, task_id))
    return len(rows)


def _topic(trial_id: int | None, task_id: str) -> str:
    # A trial's readers wait on its trial id (TrialLogs), every other task's on its task id.
    return trial_logs_topic(trial_id) if trial_id is not None else task_logs_topic(task_id)


@dataclass(frozen=True)
class LogFilter:
    """Which lines to read: a trial's (by trial id, as TrialLogs asks) or any task's (by task id)."""

    trial_id: int | None = None
    task_id: str = ""
    allocation_ids: tuple[str, ...] = ()
    agent_ids: tuple[str, ...] = ()
    container_ids: tuple[str, ...] = ()
    rank_ids: tuple[int, ...] = ()
    levels: tuple[str, ...] = ()
    stdtypes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    search_text: str = ""
    after: datetime | None = None
    before: datetime | None = None


def _query(f: LogFilter) -> Select[models.TaskLog]:
    if f.trial_id is not None:
        q = select(models.TaskLog).where(models.TaskLog.trial_id == f.trial_id)
    else:
        q = select(models.TaskLog).where(models.TaskLog.task_id == f.task_id)
    if f.allocation_ids:
        q = q.where(models.TaskLog.allocation_id.in_(f.allocation_ids))
    if f.agent_ids:
        q = q.where(models.TaskLog.agent_id.in_(f.agent_ids))
    if f.container_ids:
        q = q.where(models.TaskLog.container_id.in_(f.container_ids))
    if f.rank_ids:
        q = q.where(models.TaskLog.rank.in_(f.rank_ids))
    if f.levels:
        q = q.where(models.TaskLog.level.in_(f.levels))
    if f.stdtypes:
        q = q.where(models.TaskLog.stdtype.in_(f.stdtypes))
    if f.sources:
        q = q.where(models.TaskLog.source.in_(f.sources))
    if f.search_text:
        # A literal, case-sensitive substring on both databases, as Determined's strpos.
        q = q.where(substring_position(models.TaskLog.message, f.search_text) > 0)
    if f.after is not None:
        q = q.where(models.TaskLog.timestamp > f.after)
    if f.before is not None:
        q = q.where(models.TaskLog.timestamp < f.before)
    return q


BATCH = 1000


def read_logs(
    ctx: MasterContext,
    f: LogFilter,
    *,
    limit: int,
    descending: bool,
    follow: bool,
    is_done: Callable[[], bool],
) -> Iterator[models.TaskLog]:
    """Lines in order; with `follow`, keep waiting for new ones until the task has ended."""
    sent = 0
    if descending and not follow:
        with ctx.db.read() as s:
            q = _query(f).order_by(models.TaskLog.id.desc())
            if limit > 0:
                q = q.limit(limit)
            yield from s.scalars(q)
        return
    last_id = 0
    topic = _topic(f.trial_id, f.task_id)
    while True:
        seen = ctx.topics.version(topic)
        done_before_read = is_done()
        with ctx.db.read() as s:
            q = _query(f).where(models.TaskLog.id > last_id).order_by(models.TaskLog.id).limit(BATCH)
            page = list(s.scalars(q))
        for row in page:
            yield row
            last_id = row.id
            sent += 1
            if 0 < limit <= sent:
                return
        if len(page) == BATCH:
            continue
        if not follow or done_before_read or ctx.topics.closed:
            return
        ctx.topics.wait(topic, seen, timeout=1.0)


# The most distinct values of one field a fields answer carries (a filter menu, not a report).
MAX_FIELD_VALUES = 1000


@dataclass(frozen=True)
class LogFields:
    """The distinct values of a task's (or a trial's) log fields, each sorted: what log filters
    can choose from (Determined's TaskLogsFields / TrialLogsFields)."""

    allocation_ids: tuple[str, ...] = ()
    agent_ids: tuple[str, ...] = ()
    container_ids: tuple[str, ...] = ()
    rank_ids: tuple[int, ...] = ()
    stdtypes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


def _distinct(s: Session, column: Any, owner: Any) -> tuple[Any, ...]:
    query = (
        select(column).where(owner, column.is_not(None)).distinct().order_by(column).limit(MAX_FIELD_VALUES)
    )
    return tuple(value for value in s.scalars(query) if value != "")


def log_fields(ctx: MasterContext, *, trial_id: int | None = None, task_id: str = "") -> LogFields:
    """A trial's (by trial id) or any task's (by task id) log fields now."""
    owner = models.TaskLog.trial_id == trial_id if trial_id is not None else models.TaskLog.task_id == task_id
    with ctx.db.read() as s:
        return LogFields(
            allocation_ids=_distinct(s, models.TaskLog.allocation_id, owner),
            agent_ids=_distinct(s, models.TaskLog.agent_id, owner),
            container_ids=_distinct(s, models.TaskLog.container_id, owner),
            rank_ids=_distinct(s, models.TaskLog.rank, owner),
            stdtypes=_distinct(s, models.TaskLog.stdtype, owner),
            sources=_distinct(s, models.TaskLog.source, owner),
        )


def follow_log_fields(
    ctx: MasterContext,
    *,
    trial_id: int | None = None,
    task_id: str = "",
    follow: bool,
    is_done: Callable[[], bool],
) -> Iterator[LogFields]:
    """The fields now; with `follow`, again each time new lines change them, until the task has
    ended (a last answer after its end carries every line it wrote)."""
    topic = _topic(trial_id, task_id)
    previous: LogFields | None = None
    while True:
        seen = ctx.topics.version(topic)
        done_before_read = is_done()
        fields = log_fields(ctx, trial_id=trial_id, task_id=task_id)
        if fields != previous:
            yield fields
            previous = fields
        if not follow or done_before_read or ctx.topics.closed:
            return
        ctx.topics.wait(topic, seen, timeout=1.0)
