"""System metrics of every task's containers, as their agents sample them (issue 46): taking the
batches the agents' streams carry, storing them, thinning old ones, and reading them back as series.

Intake: a batch is checked whole before anything of it is stored (a malformed or oversized one is
refused, naming the field, and the stream goes on); a sample of a container that is not on the
sending agent is dropped (an agent speaks only of its own containers). Batches that agents send at
the same moment are stored in one transaction (kernel/group_commit.py). Nothing is acknowledged:
a batch lost with its stream is a gap in the series, not a loss the agent must make good.

Retention: full resolution for `full_resolution` (the master's --system-metrics-full-hours), then
one row per container and THIN_PERIOD (the first of its period, marked `thinned`), in short
transactions of whole periods.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import orjson
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, aliased

from cairn.agent.v1 import agent_pb2 as apb
from services.common.logging import get_logger
from services.master.domain.kernel.clock import utcnow
from services.master.domain.kernel.context import MasterContext
from services.master.domain.kernel.errors import InvalidArgument
from services.master.domain.kernel.group_commit import GroupCommit
from services.master.domain.kernel.loops import BackgroundLoop
from services.master.domain.kernel.topics import task_topic, trial_topic
from services.master.domain.metrics.container_owners import ContainerOwner, ContainerOwners
from services.master.store import models, system_metric_rows
from services.master.store.db import Database

log = get_logger(__name__)

Row = models.TaskSystemMetric

# The agent's bound on one batch (services/agent/system_metrics/collector.py sends no more).
MAX_SAMPLES_PER_BATCH = 512
MAX_GPUS_PER_SAMPLE = 64
MAX_ID = 160
# Bounds no real reading reaches: percent of one core on a 4,096-core machine; 1 PB/s; 100 kW.
MAX_CPU_UTIL = 100.0 * 4096
MAX_RATE = 1e15
MAX_WATTS = 1e5
MAX_BYTES = 1 << 62
# A sample further than this from the master's clock is refused (a broken agent clock).
MAX_CLOCK_SKEW = timedelta(days=1)
# Agents' batches in one transaction at most.
MAX_BATCHES = 64

# After the full-resolution window: one row per container per period.
THIN_PERIOD = timedelta(minutes=5)
# Periods thinned in one transaction, and transactions a pass.
THIN_PERIODS_PER_STEP = 12
THIN_STEPS_PER_PASS = 20
THIN_LOOP_S = 300.0

RateField = Literal[
    "disk_read_bytes_per_s", "disk_write_bytes_per_s", "net_recv_bytes_per_s", "net_sent_bytes_per_s"
]
RATE_FIELDS: tuple[RateField, ...] = (
    "disk_read_bytes_per_s",
    "disk_write_bytes_per_s",
    "net_recv_bytes_per_s",
    "net_sent_bytes_per_s",
)
# Series the samples hold: name, the row's column, unit. Named apart from what Determined's own
# profiler (core.profiler.on(), below) reports from inside a trial, which the profiler API serves
# beside them: its figures are the machine's, these the container's.
HOST_SERIES: tuple[tuple[str, str, str], ...] = (
    ("container_cpu_util", "cpu_util", "percent"),
    ("container_memory_used", "memory_bytes", "bytes"),
    ("container_disk_throughput_read", "disk_read_bytes_per_s", "bytes/s"),
    ("container_disk_throughput_write", "disk_write_bytes_per_s", "bytes/s"),
    ("container_net_throughput_recv", "net_recv_bytes_per_s", "bytes/s"),
    ("container_net_throughput_sent", "net_sent_bytes_per_s", "bytes/s"),
    ("container_processes", "processes", "count"),
)
# Per GPU: name, index in a row's gpus entry, unit.
GPU_SERIES: tuple[tuple[str, int, str], ...] = (
    ("container_gpu_util", 1, "percent"),
    ("container_gpu_memory_used", 2, "bytes"),
    ("container_gpu_power", 3, "watts"),
)
UNITS = {name: unit for name, _, unit in HOST_SERIES} | {name: unit for name, _, unit in GPU_SERIES}


@dataclass
class Intake:
    """What became of one batch: samples stored, and dropped (not the agent's containers)."""

    stored: int = 0
    dropped: int = 0


# The bounds of each number a sample holds: (field, highest).
_SAMPLE_BOUNDS: tuple[tuple[str, float], ...] = (
    ("cpu_util", MAX_CPU_UTIL),
    ("memory_bytes", MAX_BYTES),
    ("processes", 1 << 31),
    *((name, MAX_RATE) for name in RATE_FIELDS),
)
_GPU_BOUNDS: tuple[tuple[str, float], ...] = (
    ("util", 100.0),
    ("memory_used_bytes", MAX_BYTES),
    ("power_watts", MAX_WATTS),
)


def check_batch(batch: apb.SystemMetrics, now: float) -> list[float]:
    """Refuse a batch that is too large or holds a reading no machine makes, naming the field; the
    samples' times, as seconds since the epoch."""
    if len(batch.samples) > MAX_SAMPLES_PER_BATCH:
        raise InvalidArgument(
            f"system_metrics.samples: {len(batch.samples)} samples, at most {MAX_SAMPLES_PER_BATCH} a batch"
        )
    skew = MAX_CLOCK_SKEW.total_seconds()
    times = []
    for index, sample in enumerate(batch.samples):
        where = f"system_metrics.samples[{index}]"
        if not 0 < len(sample.container_id) <= MAX_ID or "\x00" in sample.container_id:
            raise InvalidArgument(f"{where}.container_id: must be 1 to {MAX_ID} characters, none NUL")
        if not sample.HasField("time"):
            raise InvalidArgument(f"{where}.time: required")
        stamp = sample.time
        if not 0 <= stamp.nanos < 1_000_000_000:
            raise InvalidArgument(f"{where}.time.nanos: must be 0 to 999999999")
        at = stamp.seconds + stamp.nanos / 1e9
        if abs(at - now) > skew:
            raise InvalidArgument(f"{where}.time: {at:.0f} is more than a day from the master's clock")
        times.append(at)
        for name, highest in _SAMPLE_BOUNDS:
            value = getattr(sample, name)
            # NaN fails both comparisons, as it should.
            if not 0 <= value <= highest:
                raise InvalidArgument(f"{where}.{name}: {value!r} is not a reading (0 to {highest:g})")
        if len(sample.gpus) > MAX_GPUS_PER_SAMPLE:
            raise InvalidArgument(f"{where}.gpus: at most {MAX_GPUS_PER_SAMPLE} GPUs a sample")
        for g, gpu in enumerate(sample.gpus):
            if not 0 < len(gpu.uuid) <= MAX_ID or "\x00" in gpu.uuid:
                raise InvalidArgument(f"{where}.gpus[{g}].uuid: must be 1 to {MAX_ID} characters, none NUL")
            for name, highest in _GPU_BOUNDS:
                value = getattr(gpu, name)
                if not 0 <= value <= highest:
                    raise InvalidArgument(
                        f"{where}.gpus[{g}].{name}: {value!r} is not a reading (0 to {highest:g})"
                    )
    return times


class SystemMetricsStore:
    def __init__(self, ctx: MasterContext) -> None:
        self._ctx = ctx
        self._owners = ContainerOwners(ctx)
        self._commits: GroupCommit[list[system_metric_rows.Row], int] = GroupCommit(self._write, MAX_BATCHES)

    def store(self, agent_id: str, batch: apb.SystemMetrics) -> Intake:
        """Check and store one agent's batch (InvalidArgument: refused whole, nothing stored)."""
        times = check_batch(batch, time.time())
        intake = Intake()
        rows: list[system_metric_rows.Row] = []
        owners = self._owners.of(sample.container_id for sample in batch.samples)
        for sample, at in zip(batch.samples, times, strict=True):
            owner = owners.get(sample.container_id)
            if owner is None or owner.agent_id != agent_id:
                intake.dropped += 1
                continue
            rows.append(_row(owner, sample, at))
        if intake.dropped:
            log.warning(
                "system metrics of containers not on the sending agent dropped",
                agent_id=agent_id,
                dropped=intake.dropped,
            )
        if rows:
            intake.stored = self._commits.run(rows)
        return intake

    def _write(self, batches: Sequence[list[system_metric_rows.Row]]) -> list[int]:
        written = [row for rows in batches for row in rows]
        with self._ctx.db.transaction() as s:
            system_metric_rows.insert(s, written)
        for task_id in {row[0] for row in written}:
            self._ctx.topics.publish(system_metrics_topic(task_id=task_id))
        for trial_id in {row[1] for row in written if row[1] is not None}:
            self._ctx.topics.publish(system_metrics_topic(trial_id=trial_id))
        return [len(rows) for rows in batches]


def system_metrics_topic(*, task_id: str = "", trial_id: int | None = None) -> str:
    """Published when a task's (a trial's) samples are stored: followers read again."""
    return (
        f"{trial_topic(trial_id)}/system-metrics"
        if trial_id is not None
        else f"{task_topic(task_id)}/system-metrics"
    )


def _row(owner: ContainerOwner, sample: apb.SystemSample, at: float) -> system_metric_rows.Row:
    # A rate the agent could not measure is unset: unknown, not zero.
    rates = [getattr(sample, name) if sample.HasField(name) else None for name in RATE_FIELDS]
    gpus = (
        orjson.dumps([[g.uuid, g.util, g.memory_used_bytes, g.power_watts] for g in sample.gpus]).decode()
        if sample.gpus
        else "[]"
    )
    return (
        owner.task_id,
        owner.trial_id,
        owner.allocation_id,
        sample.container_id,
        owner.agent_id,
        at,
        sample.cpu_util,
        sample.memory_bytes,
        rates[0],
        rates[1],
        rates[2],
        rates[3],
        sample.processes,
        gpus,
    )


# ---- reading ----


@dataclass
class Series:
    """One series: a metric on one agent (and one GPU), its readings in time order."""

    name: str
    agent_id: str
    gpu_uuid: str = ""
    unit: str = ""
    times: list[datetime] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


def series_of(
    s: Session,
    *,
    task_id: str | None = None,
    trial_id: int | None = None,
    since: datetime | None = None,
    after_id: int = 0,
    limit: int = 0,
) -> tuple[list[Series], int]:
    """Every series of a task's (or a trial's, over all its tasks) samples, oldest first; with
    `limit`, only the latest `limit` samples per container. Also the highest row id read (a
    follower's next `after_id`)."""
    query = select(Row).where(Row.id > after_id)
    query = (
        query.where(Row.task_id == task_id) if task_id is not None else query.where(Row.trial_id == trial_id)
    )
    if since is not None:
        query = query.where(Row.at > since)
    if limit > 0:
        # The latest `limit` of each container, chosen by the database: a day-long task's page
        # reads what it shows, not every row it has.
        rank = (
            func.row_number()
            .over(partition_by=Row.container_id, order_by=(Row.at.desc(), Row.id.desc()))
            .label("rank")
        )
        ranked = query.add_columns(rank).subquery()
        latest = aliased(Row, ranked)
        query = select(latest).where(ranked.c.rank <= limit).order_by(latest.at, latest.id)
        rows = list(s.scalars(query))
    else:
        rows = list(s.scalars(query.order_by(Row.at, Row.id)))
    return to_series(rows), max((r.id for r in rows), default=after_id)


def to_series(rows: Iterable[models.TaskSystemMetric]) -> list[Series]:
    found: dict[tuple[str, str, str], Series] = {}

    def add(name: str, agent_id: str, gpu: str, at: datetime, value: float) -> None:
        key = (name, agent_id, gpu)
        series = found.get(key)
        if series is None:
            series = found[key] = Series(name, agent_id, gpu, UNITS[name])
        series.times.append(at)
        series.values.append(float(value))

    for row in rows:
        for name, column, _ in HOST_SERIES:
            value = getattr(row, column)
            if value is not None:
                add(name, row.agent_id, "", row.at, value)
        for gpu in row.gpus:
            for name, index, _ in GPU_SERIES:
                add(name, row.agent_id, str(gpu[0]), row.at, gpu[index])
    return sorted(found.values(), key=lambda x: (x.name, x.agent_id, x.gpu_uuid))


# Groups Determined's Core API profiler (core.profiler.on()) reports a trial's system metrics in:
# {agent id: {metric: value}}, the GPU group {agent id: {gpu uuid: {metric: value}}}, the disk
# group's per-path figures {agent id: {path: {metric: value}}}. They are stored as Determined
# stores them (trial metrics of these groups) and read here as series beside the agents' own.
PROFILER_GROUPS = ("gpu", "cpu", "memory", "disk", "network")


def profiler_series_of(s: Session, trial_id: int, after_id: int = 0) -> tuple[list[Series], int]:
    """The series of what the trial's code reported with Determined's profiler; and the highest
    metrics row id read."""
    found: dict[tuple[str, str, str], Series] = {}
    last = after_id
    for row_id, group, at, values in s.execute(
        select(models.Metric.id, models.Metric.group_name, models.Metric.report_time, models.Metric.metrics)
        .where(
            models.Metric.trial_id == trial_id,
            models.Metric.group_name.in_(PROFILER_GROUPS),
            models.Metric.archived.is_(False),
            models.Metric.id > after_id,
        )
        .order_by(models.Metric.id)
    ):
        last = max(last, row_id)
        for agent_id, figures in (values or {}).items():
            if not isinstance(figures, dict):
                continue
            for key, value in figures.items():
                if isinstance(value, dict):
                    # A GPU's figures (by uuid), or a disk path's.
                    for name, inner in value.items():
                        if group == "gpu":
                            _add(found, name, str(agent_id), str(key), at, inner)
                        else:
                            _add(found, f"{name}:{key}", str(agent_id), "", at, inner)
                else:
                    _add(found, str(key), str(agent_id), "", at, value)
    return sorted(found.values(), key=lambda x: (x.name, x.agent_id, x.gpu_uuid)), last


def _add(
    found: dict[tuple[str, str, str], Series], name: str, agent: str, gpu: str, at: datetime, value: Any
) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return
    series = found.get((name, agent, gpu))
    if series is None:
        series = found[(name, agent, gpu)] = Series(name, agent, gpu, "")
    series.times.append(at)
    series.values.append(float(value))


# ---- retention ----


def thin(db: Database, full_resolution: timedelta, now: datetime) -> int:
    """Keep one row per container and THIN_PERIOD of the rows older than `full_resolution`: the
    first of each period, marked thinned; the rest are deleted. Whole periods a transaction, at
    most THIN_STEPS_PER_PASS transactions; the number of rows deleted."""
    period = THIN_PERIOD.total_seconds()
    cutoff = _period_start(now - full_resolution, period)
    deleted = 0
    for _ in range(THIN_STEPS_PER_PASS):
        with db.transaction() as s:
            oldest = s.scalar(
                select(Row.at).where(Row.at < cutoff, Row.thinned.is_(False)).order_by(Row.at).limit(1)
            )
            if oldest is None:
                break
            start = _period_start(oldest, period)
            end = min(cutoff, start + THIN_PERIOD * THIN_PERIODS_PER_STEP)
            kept: dict[tuple[str, float], int] = {}
            dropped: list[int] = []
            for row_id, container_id, at in s.execute(
                select(Row.id, Row.container_id, Row.at)
                .where(Row.at >= start, Row.at < end, Row.thinned.is_(False))
                .order_by(Row.at, Row.id)
            ):
                key = (container_id, _period_start(at, period).timestamp())
                if key in kept:
                    dropped.append(row_id)
                else:
                    kept[key] = row_id
            for chunk in range(0, len(dropped), 500):
                s.execute(delete(Row).where(Row.id.in_(dropped[chunk : chunk + 500])))
            kept_ids = list(kept.values())
            for chunk in range(0, len(kept_ids), 500):
                s.execute(update(Row).where(Row.id.in_(kept_ids[chunk : chunk + 500])).values(thinned=True))
            deleted += len(dropped)
    return deleted


def _period_start(at: datetime, period_s: float) -> datetime:
    seconds = at.timestamp()
    return datetime.fromtimestamp(seconds - seconds % period_s, UTC)


def start_thinning(ctx: MasterContext, period_s: float = THIN_LOOP_S) -> BackgroundLoop:
    full = timedelta(hours=ctx.settings.system_metrics_full_hours)

    def step() -> None:
        deleted = thin(ctx.db, full, utcnow())
        if deleted:
            log.info("old system metrics thinned", deleted=deleted)

    loop = BackgroundLoop(ctx, "system-metrics-thinning", step, period_s=period_s)
    loop.start()
    return loop
